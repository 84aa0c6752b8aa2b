// `autoshard train` and `autoshard eval`: GPT-2 on a token stream.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "autoshard/app/language_model_training.h"
#include "autoshard/app/pipeline_choice.h"
#include "autoshard/app/training_run.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/io/crash_point.h"
#include "autoshard/io/token_data.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/nn/generation.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/pipeline.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/runtime/memory.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/runtime/timeline.h"
#include "cli/arguments.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/output_file.h"
#include "cli/plan_pipeline.h"
#include "cli/train_options.h"

namespace autoshard::cli {
namespace {

struct EvalOptions : CommonOptions {
  int64_t batches = 10;
  bool json = false;
  std::string weights_dtype = "f32";  // f32, bf16, int8: the loss of the rounded weights
};

// The rows of each batch this process reads: all of them, or under mpirun
// only its own device's block of the batch (its share of the data).
std::pair<int64_t, int64_t> own_rows(const Model& model, int64_t batch, int64_t seq,
                                     bool pipelined) {
  const auto& d = model.distribution_strategy();
  const World& world = World::process();
  // A pipeline's stages cut the whole batch into micro-batches themselves.
  if (!d || !world.distributed() || pipelined) return {0, batch};
  const Sharding s = d->input_layout({batch, seq});
  const int64_t first = s.offsets({batch, seq}, d->mesh(), world.rank())[0];
  return {first, first + s.local_shape({batch, seq}, d->mesh(), world.rank())[0]};
}

// A .bin file holds token ids. Text (a file, or the built-in corpus) is read
// as bytes by a byte-level model and through its directory's tokenizer by any
// other; without a tokenizer the bytes are the ids, and the source says so.
TokenData read_data(const CommonOptions& o, const LanguageModelConfig& cfg) {
  if (o.data.ends_with(".bin") || cfg.vocab_size() == 256)
    return o.data.empty() ? TokenData::builtin() : TokenData::from_file(o.data);
  const std::string source = o.data.empty() ? "the built-in corpus" : o.data;
  const std::unique_ptr<Tokenizer> tokenizer = model_tokenizer(o);
  if (!tokenizer) {  // the source, as train's first line shows it, says so
    const std::string as_bytes = " (bytes as token ids: no tokenizer in the model's directory)";
    TokenData d = o.data.empty() ? TokenData::builtin() : TokenData::from_file(o.data);
    d.set_source(d.source() + as_bytes);
    return d;
  }
  if (o.data.empty())
    return TokenData(tokenizer->encode(builtin_corpus()), source + " (tokenized)");
  // Tokenized a piece at a time, the ids' growth checked against memory.
  return TokenData(encode_text_file(*tokenizer, o.data, "--data"), source + " (tokenized)");
}

TokenData load_data(CommonOptions& o, const LanguageModelConfig& cfg,
                    TokenData::Sampling sampling = TokenData::Sampling::Sequential) {
  if (o.seq == 0) o.seq = std::min<int64_t>(128, cfg.max_positions());
  AS_CHECK(o.seq > 0 && o.seq <= cfg.max_positions(), "--seq ", o.seq,
           " must be between 1 and the model's ", cfg.max_positions_field(), " (",
           cfg.max_positions(), ")");
  TokenData data = read_data(o, cfg);
  data.set_sampling(sampling, o.seed);
  data.validate(o.batch, o.seq, cfg.vocab_size());
  return data;
}

// Samples `count` tokens after `prompt` at `temperature` (seeded), each from
// the last `seq` tokens: the model was trained on windows at random offsets,
// so any position may hold any part of the text. (A sliding window, not the
// key-value cache of `autoshard generate`, so the sample may run past the
// model's positions.)
std::string sample_text(Model& model, const std::string& prompt, int64_t count, int64_t seq,
                        double temperature) {
  std::vector<int32_t> tokens(prompt.begin(), prompt.end());
  Tensor window({1, seq}, DType::I32);
  std::mt19937_64 rng(42);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t len = std::min<int64_t>(static_cast<int64_t>(tokens.size()), seq);
    std::fill_n(window.i32(), seq, 0);
    std::copy(tokens.end() - len, tokens.end(), window.i32());
    Tensor logits = model.predict_on_batch(window);  // [1, T, V]; position len-1 sees the context
    const int64_t v = logits.dim(2);
    tokens.push_back(choose_token({logits.f32() + (len - 1) * v, static_cast<size_t>(v)},
                                  {.temperature = temperature}, rng));
  }
  std::string out;
  for (size_t i = prompt.size(); i < tokens.size(); ++i) out += static_cast<char>(tokens[i]);
  return out;
}

// A config too big for this machine, named by its largest term before
// anything is traced: weights, gradients and AdamW's two moments take 16
// bytes a parameter. (In-process devices share this one machine; under mpirun
// the model's own check, per rank, applies.)
void check_config_fits(const LanguageModelConfig& cfg) {
  const std::optional<int64_t> available = available_memory_bytes();
  if (!available || World::process().distributed()) return;
  const std::vector<SizeTerm> terms = cfg.config->size_terms();
  double params = 0;
  for (const SizeTerm& t : terms) params += t.parameters;
  if (params * 16 <= double(*available)) return;
  const SizeTerm& worst = *std::max_element(
      terms.begin(), terms.end(),
      [](const SizeTerm& a, const SizeTerm& b) { return a.parameters < b.parameters; });
  fail("model config: ", worst.fields, " gives ", worst.parameters,
       " parameters; training the model's ", params, " parameters needs ",
       format_bytes(params * 16), " (weights, gradients, AdamW state) but ",
       format_bytes(double(*available)), " is available");
}

std::shared_ptr<Optimizer> make_optimizer(const TrainOptions& o, const LanguageModelConfig& cfg) {
  return language_model_optimizer({.learning_rate = o.lr,
                                   .schedule = o.schedule,
                                   .warmup = o.warmup,
                                   .weight_decay = o.weight_decay,
                                   .clipnorm = o.clip},
                                  o.steps, cfg.vocab_size());
}

// What a checkpoint records of the run, and what a resumed run must share
// with it to continue at the right tokens.
nlohmann::json run_state(const TrainOptions& o, const Model& model, int64_t step) {
  const auto& dist = model.distribution_strategy();
  return {{"data_position", step},
          {"model", o.model},
          {"batch", o.batch},
          {"seq", o.seq},
          {"sampling", o.sampling},
          {"seed", o.seed},
          {"mesh", dist ? dist->mesh().to_string() : "1 device"},
          {"plan", o.plan}};
}

// The settings a resumed run must share with its checkpoint.
const std::vector<ResumeSetting> kLanguageModelResumeSettings = {
    {"batch", "--batch"}, {"seq", "--seq"}, {"sampling", "--sampling"}, {"seed", "--seed"}};

// The run's first line: the model, the data and where it runs.
void print_run_header(const TrainOptions& o, Model& model, const TokenData& data, bool piped) {
  if (!World::process().leader()) return;
  const auto& dist = model.distribution_strategy();
  const std::string where =
      piped  ? cat("mesh ", o.mesh, " (", o.pipe_schedule, ", ", o.microbatches, " micro-batches)")
      : dist ? "mesh " + dist->mesh().to_string()
             : std::string("1 device");
  std::fprintf(stderr, "model %s: %lld parameters | data %s: %lld tokens | B=%lld T=%lld | %s\n",
               o.model.c_str(), static_cast<long long>(model.count_params()), data.source().c_str(),
               static_cast<long long>(data.size()), static_cast<long long>(o.batch),
               static_cast<long long>(o.seq), where.c_str());
}

// --save: the trained weights as a KerasHub preset when they came from one
// (its tokenizer copied), else as a Hugging Face directory.
void save_trained(const TrainOptions& o, const LanguageModelConfig& cfg, Model& model) {
  const std::string from = o.weights.empty() ? o.model : o.weights;
  if (keras_hub::is_preset(from))
    keras_hub::save_preset(model, *cfg.config, o.keras.save, from);
  else
    save_language_model_hf(model, o.keras.save);
  if (World::process().leader())
    std::fprintf(stderr, "saved the trained model to %s\n", o.keras.save.c_str());
}

// A --mesh with a pipe axis: its stages, run by a PipelineTrainer, each
// stage's programs laid out over the other axes by --plan (AutoShard: the
// whole model planned on one micro-batch); null without a pipe axis.
std::unique_ptr<PipelineTrainer> make_pipeline(TrainOptions& o, Model& model,
                                               const LanguageModelConfig& cfg) {
  const DeviceMesh mesh = o.mesh.empty() ? DeviceMesh() : DeviceMesh::parse(o.mesh);
  const int pipe = mesh.axis_index("pipe");
  AS_CHECK(pipe >= 0 || (o.microbatches == 0 && o.microbatch_size == 0 && o.virtual_stages == 1),
           "--microbatches, --microbatch-size and --virtual-stages need a pipe axis in --mesh "
           "(e.g. --mesh pipe=2)");
  AS_CHECK(o.microbatches == 0 || o.microbatch_size == 0,
           "give either --microbatches or --microbatch-size, not both");
  if (pipe < 0) return nullptr;
  AS_CHECK(o.trace.empty(), "--trace does not record pipelined steps yet");
  AS_CHECK(o.virtual_stages == 1 || o.pipe_schedule == "interleaved",
           "--virtual-stages needs --pipe-schedule interleaved");
  const World& world = World::process();
  AS_CHECK(!world.distributed() || world.size() == mesh.size(), "--mesh ", o.mesh, " has ",
           mesh.size(), " devices but mpirun started ", world.size(),
           " ranks; start one rank per device (mpirun -np ", mesh.size(), ")");
  // Under mpirun each rank holds its own stage's weights only: nothing
  // holds the whole model to save it as one.
  AS_CHECK(!world.distributed() || o.keras.save.empty(),
           "--save with a pipe axis under mpirun: each rank holds only its stage's weights; keep "
           "checkpoints (--checkpoint-dir, which any mesh resumes) or --save in-process");
  if (!world.distributed()) (void)world.local_devices(mesh);  // as many threads as allowed
  AS_CHECK(!o.zero1 || mesh.axis_index("data") >= 0, "--zero1 shards optimizer state over the ",
           "data axis; --mesh ", o.mesh, " has none inside its stages");
  const int stages = mesh.axis_size(pipe);
  // --microbatch-size b: b sequences on each data replica (as plan prices
  // it; the last micro-batch takes what is left). Default: one micro-batch
  // per stage (interleaved needs a multiple of them).
  if (o.microbatch_size > 0) {
    const int data = mesh.axis_index("data") >= 0 ? mesh.axis_size(mesh.axis_index("data")) : 1;
    const int64_t rows = o.microbatch_size * data;
    o.microbatches = (o.batch + rows - 1) / rows;
  }
  if (o.microbatches == 0) o.microbatches = std::min<int64_t>(stages, o.batch);
  AS_CHECK(o.microbatches <= o.batch, "--microbatches ", o.microbatches,
           " needs at least as many sequences in --batch (", o.batch, ")");
  if (mesh.size() > mesh.axis_size(pipe)) {
    CommonOptions inside = o;
    inside.mesh = in_stage_mesh(mesh).to_string();
    // AutoShard plans the whole model's step on the largest micro-batch
    // (the stages take its weights' and state's layouts), which the stages
    // hold between them: its memory is the stages' together.
    if (inside.plan == "auto") {
      const double device = o.memory_per_device > 0
                                ? o.memory_per_device
                                : Cluster::for_this_run(o.cluster, o.hosts).memory_bytes;
      inside.memory_per_device = device * stages;
    }
    model.set_distribution(make_distribution(inside, model, cfg));
    if (inside.plan == "auto") {
      const int64_t rows = (o.batch + o.microbatches - 1) / o.microbatches;
      model.plan_training({rows, o.seq}, {rows, o.seq}, DType::I32);
    }
  }
  const PipelineShape shape{stages, o.microbatches, o.virtual_stages,
                            parse_pipeline_schedule(o.pipe_schedule)};
  AS_CHECK(shape.schedule != PipelineSchedule::Interleaved || o.microbatches % stages == 0,
           "--pipe-schedule interleaved needs --microbatches a multiple of pipe (", stages,
           "), not ", o.microbatches);
  return std::make_unique<PipelineTrainer>(model, shape);
}

// --devices N under AutoShard, in-process: the pipelines `plan --devices N
// --predict` prices (app/pipeline_choice.h; each stage recomputing its
// forward pass, as the stages run) beside AutoShard's plan of N devices
// without a pipe axis, on the run's cluster; the faster that fits is
// trained. A pipeline's mesh, micro-batches and schedule become the run's
// (and the model keeps no distribution: make_pipeline lays out the
// stages); else AutoShard's distribution is returned.
std::shared_ptr<Distribution> choose_pipeline_or_mesh(TrainOptions& o, Model& model,
                                                      const LanguageModelConfig& cfg) {
  const Cluster cluster = Cluster::for_this_run(o.cluster, o.hosts);
  CommonOptions priced = o;
  priced.recompute = true;
  std::vector<std::string> why;
  const std::optional<PricedPipeline> piped =
      choose_pipeline(pipeline_run(priced, cluster, o.bf16), cfg, o.devices, why);
  std::shared_ptr<Distribution> dist;
  std::string unpiped = "none fits";
  try {
    dist = make_distribution(o, model, cfg);
    model.set_distribution(dist);
    const Partition p = model.plan_training({o.batch, o.seq}, {o.batch, o.seq}, DType::I32);
    const StepPrediction s = predict(p, cluster, {o.bf16, double(o.batch * o.seq), 0});
    const UnpipedStep step{p.mesh.to_string(), s.step_s, s.memory.total(),
                           s.memory.total() <= cluster.memory_bytes};
    if (!piped || !pipeline_is_faster(*piped, step)) return dist;
    unpiped = cat(p.mesh.to_string(), " ", s.step_s, " s", step.fits ? "" : " (does not fit)");
  } catch (const Error& e) {
    // Only AutoShard's "nothing fits" gives way to a pipeline that does.
    if (!piped || !std::string(e.what()).starts_with("AutoShard: no ")) throw;
  }
  model.set_distribution(nullptr);
  o.mesh = piped->mesh.to_string();
  o.devices = 0;
  o.plan = piped->stage_plan;
  o.microbatches = piped->shape.microbatches;
  o.microbatch_size = 0;
  o.pipe_schedule = pipeline_schedule_name(piped->shape.schedule);
  o.virtual_stages = piped->shape.virtual_stages;
  if (World::process().leader())
    std::fprintf(stderr,
                 "--devices %d: a pipeline, predicted %.4g s a step (without a pipe axis: %s)\n",
                 piped->mesh.size(), piped->predicted.step_s, unpiped.c_str());
  return nullptr;
}

// The first and last losses of the steps run, and the step after the last.
struct StepLosses {
  double first = NAN, last = NAN;
  int64_t end = 0;
};

// The steps from checkpoints.start(): printed, logged (--log), checkpointed,
// stopped by SIGINT or SIGTERM after the step they arrive in.
StepLosses run_steps(const TrainOptions& o, Model& model, PipelineTrainer* pipeline,
                     const TokenData& data, const Optimizer& optimizer,
                     RunCheckpoints& checkpoints) {
  const bool printer = World::process().leader();
  const int64_t start = checkpoints.start();
  std::ofstream log;
  if (!o.log.empty() && printer) log = open_output_stream(o.log, "--log", o.overwrite, o.resume);
  stop_training_on_signals();
  const bool tty = ::isatty(STDERR_FILENO);
  StepLosses losses;
  const auto [row_begin, row_end] = own_rows(model, o.batch, o.seq, pipeline != nullptr);
  const LanguageModelSteps steps{
      .first = start,
      .end = o.steps,
      .batch = o.batch,
      .seq = o.seq,
      .row_begin = row_begin,
      .row_end = row_end,
      .error_prefix = "",
      .divergence_advice = "lower --lr, clip harder with --clip, or check the data"};
  auto train_on_batch = [&](const Tensor& x, const Tensor& y) {
    return pipeline ? pipeline->train_on_batch(x, y) : model.train_on_batch(x, y);
  };
  losses.end =
      train_language_model_steps(data, steps, train_on_batch, [&](const LanguageModelStep& s) {
        if (s.index == start) losses.first = s.loss;
        losses.last = s.loss;
        const double tps = double(o.batch * o.seq) / s.seconds;
        if (printer && (tty || s.index % 10 == 0 || s.index + 1 == o.steps))
          std::fprintf(stderr, "%sstep %5lld/%lld | loss %.4f | %.1f ms | %.0f tok/s%s",
                       tty ? "\r" : "", static_cast<long long>(s.index + 1),
                       static_cast<long long>(o.steps), s.loss, s.seconds * 1e3, tps,
                       tty ? "   " : "\n");
        if (log.is_open())
          log << nlohmann::json{{"step", s.index + 1},
                                {"loss", s.loss},
                                {"lr", optimizer.learning_rate_at(s.index + 1)},
                                {"step_ms", s.seconds * 1e3},
                                {"tokens_per_second", tps},
                                {"peak_rss_bytes", peak_rss_bytes()}}
                     .dump()
              << "\n"
              << std::flush;
        crash_point("train.step");
        checkpoints.after_step(s.index + 1, s.loss);
        if (const int sig = training_stop_signal(); sig != 0) checkpoints.stop(sig, s.index + 1);
        return true;
      });
  return losses;
}

// A byte-level model's sample after training (--sample characters).
void print_sample(const TrainOptions& o, const LanguageModelConfig& cfg, Model& model, bool piped) {
  const bool printer = World::process().leader();
  const int64_t sample = o.sample >= 0 ? o.sample : (cfg.vocab_size() == 256 ? 300 : 0);
  if (sample > 0 && cfg.vocab_size() == 256 && piped && World::process().distributed()) {
    if (printer)
      std::printf(
          "no sample: each rank holds only its stage's weights (generate from a "
          "checkpoint, --checkpoint-dir)\n");
  } else if (sample > 0 && cfg.vocab_size() == 256) {
    // Every rank takes part in generating (the forward pass is sharded).
    const std::string prompt = "The ";
    const std::string text = sample_text(model, prompt, sample, o.seq, o.temperature);
    if (printer) std::printf("sample: %s%s\n", prompt.c_str(), text.c_str());
  }
}

void run_train(TrainOptions& o) {
  // Under mpirun only rank 0 prints and writes the log. Its path is checked
  // before any long work; a resumed run appends to its log.
  const bool printer = World::process().leader();
  if (!o.log.empty() && printer && !o.resume) check_output_path(o.log, "--log", o.overwrite);
  if (!o.keras.save.empty() && printer) check_output_path(o.keras.save, "--save", false, false);
  const LanguageModelConfig cfg = model_config(o);
  TokenData data = load_data(
      o, cfg,
      o.sampling == "random" ? TokenData::Sampling::Random : TokenData::Sampling::Sequential);
  AS_CHECK(!o.checkpoint_dir.empty() || (o.save_every == 0 && !o.resume),
           "--save-every and --resume need --checkpoint-dir");
  check_config_fits(cfg);
  std::unique_ptr<Model> built = cfg.build(o.seq, o.seed);
  Model& model = *built;
  model.set_recompute(o.recompute);
  auto optimizer = make_optimizer(o, cfg);
  model.compile(optimizer, losses::sparse_categorical_crossentropy);
  // AutoShard choosing the mesh may choose a pipeline (in-process: ranks
  // would each have to price it alike).
  std::shared_ptr<Distribution> chosen;
  const bool may_pipe =
      o.mesh.empty() && o.devices > 1 && o.plan == "auto" && !World::process().distributed();
  if (may_pipe) chosen = choose_pipeline_or_mesh(o, model, cfg);
  std::unique_ptr<PipelineTrainer> pipeline = make_pipeline(o, model, cfg);
  if (!pipeline) model.set_distribution(chosen ? chosen : make_distribution(o, model, cfg));
  check_layout_map(o, model.distribution_strategy().get(), model);
  if (!o.weights.empty()) load_language_model_weights(model, o.weights);
  // Training from scratch on a directory's architecture is what --model
  // means; say so when the directory also holds weights, which --weights reads.
  if (o.weights.empty() && printer && holds_language_model_weights(o.model))
    std::fprintf(stderr,
                 "note: --model %s gives the architecture only: training starts from random "
                 "weights (--weights %s starts from the directory's)\n",
                 o.model.c_str(), o.model.c_str());
  RunCheckpoints checkpoints(
      {o.checkpoint_dir, o.save_every, o.keep, o.resume}, model,
      [&](int64_t step) { return run_state(o, model, step); }, kLanguageModelResumeSettings);
  const int64_t start = checkpoints.start();
  print_run_header(o, model, data, pipeline != nullptr);
  const StepLosses losses = run_steps(o, model, pipeline.get(), data, *optimizer, checkpoints);
  checkpoints.finish(losses.end);
  if (!o.keras.save.empty()) save_trained(o, cfg, model);
  if (printer && ::isatty(STDERR_FILENO)) std::fprintf(stderr, "\n");
  if (printer && o.steps > start)
    std::printf("loss %.4f -> %.4f over %lld steps\n", losses.first, losses.last,
                static_cast<long long>(o.steps - start));
  print_sample(o, cfg, model, pipeline != nullptr);
}

void run_eval(EvalOptions& o) {
  const WeightsDType weights_dtype = parse_weights_dtype(o.weights_dtype, "--weights-dtype");
  const LanguageModelConfig cfg = model_config(o);
  TokenData data = load_data(o, cfg);
  AS_CHECK(o.batches > 0, "--batches must be positive");
  std::unique_ptr<Model> built = cfg.build(o.seq, o.seed);
  Model& model = *built;
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  model.set_distribution(make_distribution(o, model, cfg));
  // As generate: a --model directory holding weights is evaluated with them.
  if (o.weights.empty() && holds_language_model_weights(o.model)) o.weights = o.model;
  if (!o.weights.empty()) load_language_model_weights(model, o.weights);
  // The weights generate --weights-dtype decodes with (their quality cost).
  const QuantizedWeights quantized = quantize_weights(model, weights_dtype);
  const int64_t n = std::min(o.batches, data.batches(o.batch, o.seq));
  Tensor x, y;
  double total = 0;
  const auto [row_begin, row_end] = own_rows(model, o.batch, o.seq, false);
  for (int64_t b = 0; b < n; ++b) {
    data.batch(b, o.batch, o.seq, x, y, row_begin, row_end);
    total += model.test_on_batch(x, y);
  }
  const double mean = total / double(n);
  AS_CHECK(std::isfinite(mean), "eval: the loss is ", std::isnan(mean) ? "nan" : "infinite",
           " (check the weights of '", o.weights.empty() ? o.model : o.weights,
           "' and the data: a NaN or infinite logit)");
  if (!World::process().leader()) return;
  if (o.json)
    std::printf("%s\n", nlohmann::json{{"loss", mean},
                                       {"batches", n},
                                       {"tokens", n * o.batch * o.seq},
                                       {"weights_dtype", o.weights_dtype}}
                            .dump()
                            .c_str());
  else
    std::printf("eval loss %.6f over %lld batches (%lld tokens)\n", mean, static_cast<long long>(n),
                static_cast<long long>(n * o.batch * o.seq));
}

// --trace: checked before anything is trained (the steps, the path), then
// the run recorded and written, an interrupted run's steps included. Under
// mpirun every rank writes its own device's timeline (FILE.rankN.json).
void traced(const TrainOptions& o, const std::function<void()>& train) {
  if (o.trace.empty()) {
    AS_CHECK(o.trace_steps.empty(), "--trace-steps needs --trace FILE.json (where to write them)");
    return train();
  }
  const TimelineSteps steps = parse_timeline_steps(o.trace_steps.empty() ? "1:" : o.trace_steps);
  const World& world = World::process();
  const std::string path = timeline_file_of_rank(o.trace, world.rank(), world.distributed());
  AS_CHECK(o.trace.ends_with(".json"), "--trace '", o.trace,
           "' must end in .json (a Chrome Trace Event Format file for Perfetto)");
  check_output_path(path, "--trace", o.overwrite);
  TimelineRecorder timeline(steps);
  auto write = [&] {
    const std::string process =
        world.distributed() ? cat("autoshard rank ", world.rank()) : std::string("autoshard");
    write_output_file(path, "--trace", timeline.document(world.rank(), process).dump(),
                      o.overwrite);
    if (world.leader())
      std::fprintf(stderr, "trace of %lld runs written to %s%s\n",
                   static_cast<long long>(timeline.runs()), path.c_str(),
                   world.distributed() ? " (one file per rank)" : "");
  };
  try {
    TimelineScope scope(timeline);
    train();
  } catch (const Interrupted&) {
    write();
    throw;
  }
  write();
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* cmd =
      app.add_subcommand("train",
                         "train a GPT model (default: a small one on a built-in text), or a saved "
                         "Keras model (--model model.keras --x X.npy --y Y.npy)");
  add_common(cmd, *o);
  constexpr int64_t kMax = int64_t{1} << 62;
  add_int(cmd, "--steps", o->steps, 0, kMax, "optimizer steps");
  add_real(cmd, "--lr", o->lr, 0, 1e3, /*lo_open=*/true,
           "AdamW peak learning rate (default: 6e-3 for byte-level models, 6e-4 otherwise)");
  cmd->add_option("--lr-schedule", o->schedule,
                  "constant, or cosine: linear warmup then cosine decay to 10% of --lr")
      ->check(CLI::IsMember({"constant", "cosine"}))
      ->capture_default_str();
  add_int(cmd, "--warmup", o->warmup, 0, kMax,
          "warmup steps of the cosine schedule (default 5%, at most 100)")
      ->default_str("");
  add_real(cmd, "--weight-decay", o->weight_decay, 0, 1e3, false, "AdamW decoupled weight decay");
  add_real(cmd, "--clip", o->clip, 0, 1e30, false, "clip the global gradient norm (0: off)");
  cmd->add_option("--log", o->log,
                  "write one JSON object per step to FILE (a new file; --resume appends)");
  add_overwrite(cmd, o->overwrite);
  add_int(cmd, "--sample", o->sample, 0, int64_t{1} << 20,
          "bytes to generate after training (byte vocabularies)")
      ->default_str("300");
  add_real(cmd, "--temperature", o->temperature, 0, 100, true,
           "sampling temperature of the sample");
  cmd->add_option("--checkpoint-dir", o->checkpoint_dir,
                  "save checkpoints under DIR (step-NNNNNNNN/)");
  add_int(cmd, "--save-every", o->save_every, 0, kMax,
          "save every N steps, in the background (0: only at the end)");
  add_int(cmd, "--keep", o->keep, 0, 1 << 30, "keep this run's last K checkpoints (0: all)");
  cmd->add_flag("--resume", o->resume, "continue from the latest checkpoint in --checkpoint-dir");
  cmd->add_option("--sampling", o->sampling,
                  "how batches are cut from the data: random windows (seeded by --seed) or "
                  "sequential (llm.c's order)")
      ->check(CLI::IsMember({"random", "sequential"}))
      ->capture_default_str();
  add_keras_train_options(cmd, *o);
  // Gradient buckets (runtime/overlap.h): process-wide, set before the step is built.
  auto bucket_mb = std::make_shared<double>(25);
  auto no_overlap = std::make_shared<bool>(false);
  add_real(cmd, "--bucket-mb", *bucket_mb, 0, 1 << 20, /*lo_open=*/true,
           "all-reduce data-parallel gradients in buckets of this many MiB, each as soon as the "
           "backward pass has made it, behind the rest of the pass")
      ->capture_default_str();
  cmd->add_flag("--no-overlap", *no_overlap,
                "all-reduce each gradient where the optimizer reads it (no buckets)");
  add_int(cmd, "--microbatches", o->microbatches, 1, int64_t{1} << 30,
          "with a pipe axis in --mesh: micro-batches per step (default: one per stage)")
      ->default_str("");
  add_int(cmd, "--microbatch-size", o->microbatch_size, 1, int64_t{1} << 30,
          "with a pipe axis in --mesh: sequences per micro-batch on each data-parallel replica "
          "(instead of --microbatches)")
      ->default_str("");
  cmd->add_option("--pipe-schedule", o->pipe_schedule,
                  "with a pipe axis in --mesh: gpipe (all forward passes, then all backward), "
                  "1f1b (one forward, one backward in turn after a warm-up) or interleaved "
                  "(1f1b over --virtual-stages chunks per device)")
      ->check(CLI::IsMember({"gpipe", "1f1b", "interleaved"}))
      ->capture_default_str();
  add_int(cmd, "--virtual-stages", o->virtual_stages, 1, 256,
          "with --pipe-schedule interleaved: stages per device (each device holds v chunks of "
          "blocks; the micro-batches a multiple of the pipe size)")
      ->capture_default_str();
  cmd->add_option("--trace", o->trace,
                  "write a timeline of the steps to FILE.json (Chrome Trace Event Format, for "
                  "Perfetto): every op of every device, collectives, steps, memory in use; "
                  "under mpirun one FILE.rankN.json per rank");
  cmd->add_option("--trace-steps", o->trace_steps,
                  "the steps --trace records: A:B, A:, :B or A (1-based; default: all)");
  cmd->callback([o, cmd, bucket_mb, no_overlap] {
    set_overlap_options({!*no_overlap, bucket_bytes_from_mb(*bucket_mb)});
    traced(*o, [&] {
      if (is_keras_training(*o))
        run_keras_train(*o, *cmd);  // a saved Keras model on NumPy arrays
      else
        run_train(*o);
    });
  });
}

void add_eval_command(CLI::App& app) {
  auto o = std::make_shared<EvalOptions>();
  CLI::App* cmd = app.add_subcommand("eval", "mean loss of a model over the first N batches");
  add_common(cmd, *o);
  add_int(cmd, "--batches", o->batches, 1, int64_t{1} << 40, "number of batches (N)");
  cmd->add_flag("--json", o->json, "print one JSON object");
  cmd->add_option("--weights-dtype", o->weights_dtype,
                  "evaluate the weights rounded as generate --weights-dtype holds them: f32, "
                  "bf16, or int8 with per-channel scales")
      ->capture_default_str();
  cmd->callback([o] { run_eval(*o); });
}

}  // namespace autoshard::cli
