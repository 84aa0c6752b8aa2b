// `autoshard train --model model.keras --x X.npy --y Y.npy`: Keras's fit on
// a mesh. The optimizer, loss, loss weights and metrics come from the file's
// compile config unless flags override them; epochs of ceil(N / B) steps
// (a last partial batch included), rows in order (--sampling sequential:
// step s takes rows [(s-1)B, sB) of its epoch) or shuffled each epoch
// (random, seeded); a Keras progress bar, the JSON log per step,
// checkpoints and --resume as for GPT training; --save writes the model
// back as a Keras file.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "autoshard/app/training_run.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/io/crash_point.h"
#include "autoshard/runtime/memory.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/keras_data.h"
#include "cli/keras_progress.h"
#include "cli/output_file.h"
#include "cli/train_options.h"

namespace autoshard::cli {
namespace {

// GPT training's flags mean nothing to a Keras model: an error, not ignored.
void refuse_gpt_flags(const CLI::App& cmd) {
  for (const char* flag : {"--data", "--seq", "--weights", "--sample", "--temperature",
                           "--weight-decay", "--recompute", "--zero1", "--microbatches",
                           "--microbatch-size", "--pipe-schedule", "--virtual-stages"})
    AS_CHECK(cmd.count(flag) == 0, flag,
             " applies to GPT training, not to a Keras model (the model file's compile config "
             "sets its optimizer; --lr, --clip, --lr-schedule, --optimizer and --loss override "
             "it)");
}

// The examples of the whole data, and the data's own check.
struct Data {
  NamedArrays x, y, val_x, val_y;
  int64_t n = 0;
};

Data read_data(const KerasModel& k, const KerasTrainOptions& o,
               const std::vector<std::string>& losses, std::map<std::string, NpyArray> raw_x) {
  Data d;
  d.x = keras_inputs_of(k, std::move(raw_x), o.x, "--x");
  d.y = read_keras_targets(k, losses, o.y, "--y");
  d.n = example_count(d.x, "--x");
  const int64_t ny = example_count(d.y, "--y");
  AS_CHECK(ny == d.n, "--x holds ", d.n, " examples but --y holds ", ny);
  if (!o.validation_x.empty()) {
    d.val_x = read_keras_inputs(k, o.validation_x, "--validation-x");
    d.val_y = read_keras_targets(k, losses, o.validation_y, "--validation-y");
    const int64_t vx = example_count(d.val_x, "--validation-x");
    const int64_t vy = example_count(d.val_y, "--validation-y");
    AS_CHECK(vx == vy, "--validation-x holds ", vx, " examples but --validation-y holds ", vy);
  }
  return d;
}

// The rows of epoch `epoch`, in the order its steps take them.
std::vector<int64_t> epoch_order(int64_t n, int epoch, bool shuffle, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  if (shuffle) {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch) + 1);
    std::shuffle(order.begin(), order.end(), rng);
  }
  return order;
}

nlohmann::json run_state(const TrainOptions& o, const Model& model, int64_t step, int64_t n) {
  const auto& dist = model.distribution_strategy();
  return {{"data_position", step},
          {"model", o.model},
          {"batch", o.batch},
          {"sampling", o.sampling},
          {"seed", o.seed},
          {"examples", n},
          {"mesh", dist ? dist->mesh().to_string() : "1 device"},
          {"plan", o.plan}};
}

// The settings a resumed run must share with its checkpoint.
const std::vector<ResumeSetting> kKerasResumeSettings = {{"batch", "--batch"},
                                                         {"sampling", "--sampling"},
                                                         {"seed", "--seed"},
                                                         {"examples", "examples in --x"}};

// The flags that replace the file's learning rate schedule and clipping.
void apply_schedule_flags(const TrainOptions& o, const CLI::App& cmd, Optimizer& optimizer,
                          int64_t total) {
  if (cmd.count("--clip")) optimizer.clipnorm = o.clip;
  if (cmd.count("--lr-schedule") && o.schedule == "cosine") {
    const double peak = optimizer.learning_rate_at(1);
    const int64_t warmup = o.warmup >= 0 ? o.warmup : std::min<int64_t>(100, total / 20);
    optimizer.schedule = cosine_decay(peak, std::max<int64_t>(1, total - warmup), 0.1, warmup);
  } else {
    AS_CHECK(cmd.count("--warmup") == 0, "--warmup needs --lr-schedule cosine");
  }
}

// Running means over an epoch's examples.
struct EpochMeans {
  std::map<std::string, double> sums;
  int64_t count = 0;
  void add(const Logs& batch, int64_t rows) {
    for (const auto& [name, v] : batch) sums[name] += v * double(rows);
    count += rows;
  }
  Logs means() const {
    Logs out;
    for (const auto& [name, s] : sums) out[name] = count ? s / double(count) : 0;
    return out;
  }
};

}  // namespace

bool is_keras_training(const TrainOptions& o) {
  return !o.keras.x.empty() || names_keras_model(o.model);
}

void add_keras_train_options(CLI::App* cmd, TrainOptions& o) {
  KerasTrainOptions& k = o.keras;
  cmd->add_option("--x", k.x, "a Keras model's inputs: an .npy, or an .npz keyed by input name");
  cmd->add_option("--y", k.y, "its targets: an .npy, or an .npz keyed by output name");
  cmd->add_option("--validation-x", k.validation_x, "inputs evaluated after each epoch");
  cmd->add_option("--validation-y", k.validation_y, "their targets");
  add_int(cmd, "--epochs", k.epochs, 1, 1 << 30,
          "passes over --x (Keras models; default 1, or as many as --steps takes)")
      ->default_str("1");
  add_int(cmd, "--verbose", k.verbose, 0, 2,
          "Keras models' progress as fit's verbose: 0 quiet, 1 a bar, 2 a line an epoch")
      ->capture_default_str();
  cmd->add_option("--save", k.save,
                  "write the trained Keras model to OUT (.keras, .h5, or a TensorFlow.js "
                  "directory; default: the input's format); never replaces OUT");
  add_keras_overrides(cmd, k.overrides, /*with_optimizer=*/true);
}

namespace {

// The flags checked before anything is read: those that go together, and
// the output paths (cli/output_file.h's rule).
void check_keras_train_flags(TrainOptions& o, const CLI::App& cmd, bool printer) {
  refuse_gpt_flags(cmd);
  AS_CHECK(cmd.count("--epochs") == 0 || cmd.count("--steps") == 0,
           "give --epochs or --steps, not both");
  if (cmd.count("--batch") == 0) o.batch = 32;  // Keras's batch_size
  if (!o.keras.save.empty() && printer) check_output_path(o.keras.save, "--save", false, false);
  if (!o.log.empty() && printer && !o.resume) check_output_path(o.log, "--log", o.overwrite);
  AS_CHECK(!o.checkpoint_dir.empty() || (o.save_every == 0 && !o.resume),
           "--save-every and --resume need --checkpoint-dir");
  AS_CHECK(!o.keras.x.empty() && !o.keras.y.empty(),
           "training a Keras model needs --x and --y (NumPy files)");
  AS_CHECK(o.keras.validation_x.empty() == o.keras.validation_y.empty(),
           "give --validation-x and --validation-y together");
}

// The file's optimizer state: resumed (the model counts its steps on), or
// why it is not used.
void resume_file_optimizer(const KerasModel& k, Model& model, bool printer) {
  if (k.has_optimizer_state) model.set_iterations(k.iterations);
  if (printer && k.has_optimizer_state)
    std::fprintf(stderr, "optimizer %s resumed from the file's state after %lld steps\n",
                 one_line(k.compile.optimizer).c_str(), static_cast<long long>(k.iterations));
  else if (printer && !k.optimizer_state_note.empty() &&
           k.optimizer_state_note != "the file holds no optimizer state")
    std::fprintf(stderr, "note: the file's optimizer state is not used (%s); %s starts from zero\n",
                 one_line(k.optimizer_state_note).c_str(), one_line(k.compile.optimizer).c_str());
}

// The graph a distribution is planned on: the training step, or with
// several inputs or outputs the forward pass, which stands for it.
Graph keras_plan_graph(const KerasModel& k, Model& model, const Data& data, int64_t batch) {
  if (k.inputs.size() == 1 && k.outputs.size() == 1) {
    Shape xs = data.x.begin()->second.shape(), ys = data.y.begin()->second.shape();
    xs[0] = ys[0] = batch;
    return model.training_graph(xs, ys, data.y.begin()->second.dtype());
  }
  Graph g;
  model.trace_forward(g, batch, true);
  return g;
}

// One step on the rows [begin, end) of the epoch's `order` (in order when
// not shuffled): its loss and metrics, and its time.
struct KerasStep {
  double loss = NAN;
  Logs logs;
  double seconds = 0;
};

KerasStep fit_rows(Model& model, const Data& data, const std::vector<int64_t>& order, int64_t begin,
                   int64_t end, bool shuffle, int64_t step) {
  const std::vector<int64_t> rows(order.begin() + begin, order.begin() + end);
  const NamedArrays xb = shuffle ? take_rows(data.x, rows) : slice_rows(data.x, begin, end);
  const NamedArrays yb = shuffle ? take_rows(data.y, rows) : slice_rows(data.y, begin, end);
  const auto t0 = std::chrono::steady_clock::now();
  const History h = model.fit(ModelInputs(xb), ModelTargets(yb),
                              {.batch_size = end - begin, .epochs = 1, .verbose = false});
  KerasStep out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.loss = h.loss.at(0);
  AS_CHECK(std::isfinite(out.loss), "training diverged: the loss is ",
           std::isnan(out.loss) ? "nan" : "infinite", " at step ", step + 1,
           " (lower --lr, clip with --clip, or check the data)");
  out.logs = {{"loss", out.loss}};
  for (const auto& [name, values] : h.metrics) out.logs[name] = values.at(0);
  return out;
}

// The --log line of step `step` (0-based) over `rows` examples.
void write_keras_log_line(std::ofstream& log, int64_t step, int epoch, const KerasStep& s,
                          int64_t rows, const Optimizer& optimizer, const Model& model) {
  nlohmann::json line = {{"step", step + 1},
                         {"epoch", epoch + 1},
                         {"loss", s.loss},
                         {"lr", optimizer.learning_rate_at(model.iterations())},
                         {"step_ms", s.seconds * 1e3},
                         {"examples_per_second", double(rows) / s.seconds},
                         {"peak_rss_bytes", peak_rss_bytes()}};
  for (const auto& [name, v] : s.logs)
    if (name != "loss") line[name] = v;
  log << line.dump() << "\n" << std::flush;
}

}  // namespace

void run_keras_train(TrainOptions& o, const CLI::App& cmd) {
  const bool printer = World::process().leader();
  check_keras_train_flags(o, cmd, printer);
  KerasOverrides overrides = o.keras.overrides;
  overrides.lr = o.lr;
  const bool file_optimizer = overrides.optimizer.empty();
  // The data first: its shapes fill the dimensions the file leaves open.
  std::map<std::string, NpyArray> raw_x = read_arrays(o.keras.x, "--x");
  KerasModel k = load_keras_for(o, {.weights = true,
                                    .optimizer_state = file_optimizer,
                                    .seed = o.seed,
                                    .input_shapes = example_shapes(raw_x)});
  Model& model = *k.model;
  const KerasCompiled compiled = compile_keras(k, overrides, /*training=*/true);
  Optimizer& optimizer = *compiled.optimizer;
  if (file_optimizer) resume_file_optimizer(k, model, printer);
  infer_output_shapes(k);
  const Data data = read_data(k, o.keras, compiled.losses, std::move(raw_x));
  const int64_t batch = std::min(o.batch, data.n);
  const int64_t per_epoch = (data.n + batch - 1) / batch;
  const int64_t total =
      cmd.count("--steps") ? o.steps : int64_t{std::max(1, o.keras.epochs)} * per_epoch;
  const int epochs = static_cast<int>((total + per_epoch - 1) / per_epoch);
  apply_schedule_flags(o, cmd, optimizer, total);  // before any step is traced
  model.set_distribution(
      keras_distribution(o, model, [&]() { return keras_plan_graph(k, model, data, batch); }));
  check_layout_map(o, model.distribution_strategy().get(), model);
  RunCheckpoints checkpoints(
      {o.checkpoint_dir, o.save_every, o.keep, o.resume}, model,
      [&](int64_t step) { return run_state(o, model, step, data.n); }, kKerasResumeSettings);
  const int64_t start = checkpoints.start();
  std::ofstream log;
  if (!o.log.empty() && printer) log = open_output_stream(o.log, "--log", o.overwrite, o.resume);
  const auto& dist = model.distribution_strategy();
  if (printer)
    std::fprintf(stderr, "model %s (%s%s): %lld parameters | x: %lld examples | B=%lld | %s\n",
                 o.model.c_str(), k.format.c_str(),
                 k.keras_version.empty() ? "" : (", Keras " + k.keras_version).c_str(),
                 static_cast<long long>(model.count_params()), static_cast<long long>(data.n),
                 static_cast<long long>(batch),
                 dist ? ("mesh " + dist->mesh().to_string()).c_str() : "1 device");
  stop_training_on_signals();
  KerasProgress progress(o.keras.verbose, printer, epochs);
  const bool shuffle = o.sampling == "random";
  std::vector<int64_t> order;
  EpochMeans epoch_means;
  double first = NAN, last = NAN;
  int64_t step = start;
  for (; step < total; ++step) {
    const int epoch = static_cast<int>(step / per_epoch);
    const int64_t b = step % per_epoch;
    if (b == 0 || step == start) {
      order = epoch_order(data.n, epoch, shuffle, o.seed);
      epoch_means = {};
      progress.epoch_begin(epoch, per_epoch);
    }
    const int64_t begin = b * batch, end = std::min(data.n, begin + batch);
    const KerasStep s = fit_rows(model, data, order, begin, end, shuffle, step);
    const double loss = s.loss;
    epoch_means.add(s.logs, end - begin);
    if (step == start) first = loss;
    last = loss;
    progress.step_end(b + 1, epoch_means.means());
    if (log.is_open()) write_keras_log_line(log, step, epoch, s, end - begin, optimizer, model);
    crash_point("train.step");
    checkpoints.after_step(step + 1, loss);
    if (b + 1 == per_epoch || step + 1 == total) {
      Logs logs = epoch_means.means();
      if (!data.val_x.empty())
        for (const auto& [name, v] :
             model.evaluate_with_metrics(ModelInputs(data.val_x), ModelTargets(data.val_y), batch))
          logs["val_" + name] = v;
      progress.epoch_end(logs);
    }
    if (const int sig = training_stop_signal(); sig != 0) checkpoints.stop(sig, step + 1);
  }
  checkpoints.finish(step);
  if (!o.keras.save.empty()) {
    save_keras_model(k, o.keras.save, "", /*with_optimizer=*/true);
    if (printer) std::fprintf(stderr, "saved the trained model to %s\n", o.keras.save.c_str());
  }
  if (printer && step > start)
    std::fprintf(stderr, "trained %lld steps: loss %.4f -> %.4f\n",
                 static_cast<long long>(step - start), first, last);
}

}  // namespace autoshard::cli
