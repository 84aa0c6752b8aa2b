// `autoshard evaluate`: a saved Keras model's loss and metrics over NumPy
// inputs and targets (Keras's model.evaluate), on one device or a mesh.
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/keras_command.h"
#include "cli/keras_data.h"
#include "cli/keras_progress.h"

namespace autoshard::cli {
namespace {

struct EvaluateOptions : CommonOptions {
  std::string x, y;
  KerasOverrides overrides;
  bool json = false;
  int verbose = 1;
};

void run_evaluate(EvaluateOptions& o) {
  // The data first: its shapes fill the dimensions the file leaves open.
  std::map<std::string, NpyArray> raw_x = read_arrays(o.x, "--x");
  KerasModel k = load_keras_for(o, {.weights = true,
                                    .optimizer_state = false,
                                    .seed = o.seed,
                                    .inference = true,
                                    .input_shapes = example_shapes(raw_x)});
  const std::vector<std::string> losses = compile_keras(k, o.overrides, false).losses;
  infer_output_shapes(k);
  const NamedArrays x = keras_inputs_of(k, std::move(raw_x), o.x, "--x");
  const NamedArrays y = read_keras_targets(k, losses, o.y, "--y");
  const int64_t n = example_count(x, "--x");
  AS_CHECK(example_count(y, "--y") == n, "--x and --y hold different numbers of examples (", n,
           " and ", example_count(y, "--y"), ")");
  Model& model = *k.model;
  model.set_distribution(keras_distribution(o, model, [&] {
    Graph g;
    model.trace_forward(g, std::min(n, o.batch), false);
    return g;
  }));
  check_layout_map(o, model.distribution_strategy().get(), model);
  KerasProgress progress(o.json ? 0 : o.verbose, World::process().leader(), 1);
  const Logs logs = model.evaluate_with_metrics(ModelInputs(x), ModelTargets(y), o.batch);
  for (const auto& [name, value] : logs)
    AS_CHECK(std::isfinite(value), "evaluate: ", name, " is not finite (",
             std::isnan(value) ? "nan" : "infinite", "); check the weights and the data");
  if (!World::process().leader()) return;
  if (o.json) {
    nlohmann::json out = logs;
    out["examples"] = n;
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  progress.show_only((n + o.batch - 1) / o.batch, logs);
  std::printf("%s\n", format_logs(logs).substr(3).c_str());
}

}  // namespace

void add_evaluate_command(CLI::App& app) {
  auto o = std::make_shared<EvaluateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "evaluate", "a saved Keras model's loss and metrics on NumPy inputs and targets");
  add_keras_common(cmd, *o, 32);
  cmd->add_option("--x", o->x, "the inputs: an .npy, or an .npz keyed by input name")->required();
  cmd->add_option("--y", o->y, "the targets: an .npy, or an .npz keyed by output name")->required();
  add_keras_overrides(cmd, o->overrides, /*with_optimizer=*/false);
  cmd->add_flag("--json", o->json, "print one JSON object: loss, each metric, examples");
  add_int(cmd, "--verbose", o->verbose, 0, 2, "0: quiet, 1 or 2: a Keras progress line")
      ->capture_default_str();
  cmd->callback([o] { run_evaluate(*o); });
}

}  // namespace autoshard::cli
