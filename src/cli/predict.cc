// `autoshard predict`: a saved Keras model's outputs for NumPy inputs, in
// inference mode (dropout off, BatchNormalization on its moving statistics),
// on one device or a mesh.
#include <cstdio>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/npy.h"
#include "cli/commands.h"
#include "cli/keras_command.h"
#include "cli/keras_data.h"
#include "cli/output_file.h"

namespace autoshard::cli {
namespace {

struct PredictOptions : CommonOptions {
  std::string x, out;
  bool overwrite = false;
};

void run_predict(PredictOptions& o) {
  const bool leader = World::process().leader();
  const bool npz = o.out.ends_with(".npz");
  AS_CHECK(npz || o.out.ends_with(".npy"), "--out '", o.out,
           "' must end in .npy (one output) or .npz (one array per output)");
  if (leader) check_output_path(o.out, "--out", o.overwrite);
  // The data first: its shapes fill the dimensions the file leaves open.
  std::map<std::string, NpyArray> raw_x = read_arrays(o.x, "--x");
  KerasModel k = load_keras_for(o, {.weights = true,
                                    .optimizer_state = false,
                                    .seed = o.seed,
                                    .inference = true,
                                    .input_shapes = example_shapes(raw_x)});
  AS_CHECK(npz || k.outputs.size() == 1, "--out '", o.out, "': the model has ", k.outputs.size(),
           " outputs; write them to an .npz (one array per output, keyed by name)");
  const NamedArrays x = keras_inputs_of(k, std::move(raw_x), o.x, "--x");
  const int64_t n = example_count(x, "--x");
  Model& model = *k.model;
  model.set_distribution(keras_distribution(o, model, [&] {
    Graph g;
    model.trace_forward(g, std::min(n, o.batch), false);
    return g;
  }));
  check_layout_map(o, model.distribution_strategy().get(), model);
  const std::vector<Tensor> outputs = model.predict_outputs(ModelInputs(x), o.batch);
  if (!leader) return;
  std::vector<std::pair<std::string, Tensor>> named;
  for (size_t i = 0; i < outputs.size(); ++i) named.emplace_back(k.outputs[i].name, outputs[i]);
  write_output_file(o.out, "--out", npz ? npz_bytes(named) : npy_bytes(outputs[0]), o.overwrite);
  std::fprintf(
      stderr, "predicted %lld examples: %s to %s\n", static_cast<long long>(n),
      [&] {
        std::string s;
        for (const auto& [name, t] : named)
          s += (s.empty() ? "" : ", ") + name + " " + shape_str(t.shape());
        return s;
      }()
          .c_str(),
      o.out.c_str());
}

}  // namespace

void add_predict_command(CLI::App& app) {
  auto o = std::make_shared<PredictOptions>();
  CLI::App* cmd = app.add_subcommand(
      "predict", "a saved Keras model's predictions for NumPy inputs (.npy or .npz)");
  add_keras_common(cmd, *o, 32);
  cmd->add_option("--x", o->x, "the inputs: an .npy, or an .npz keyed by input name")->required();
  cmd->add_option("--out", o->out,
                  "where the predictions go: an .npy, or an .npz keyed by output name")
      ->required();
  add_overwrite(cmd, o->overwrite);
  cmd->callback([o] { run_predict(*o); });
}

}  // namespace autoshard::cli
