#include "cli/plan_pipeline.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <variant>

#include "autoshard/error.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/pipeline.h"
#include "autoshard/runtime/memory.h"
#include "cli/keras_command.h"
#include "cli/output_file.h"

namespace autoshard::cli {

std::string in_stage_mesh(const DeviceMesh& full) {
  std::string spec;
  for (int a = 0; a < full.rank(); ++a) {
    if (full.axis_names()[size_t(a)] == "pipe") continue;
    spec += (spec.empty() ? "" : ",") + full.axis_names()[size_t(a)] + "=" +
            std::to_string(full.axis_size(a));
  }
  return spec.empty() ? "data=1,model=1" : spec;
}

namespace {

// One trace: the model with `layers` blocks, one micro-batch of `rows`
// sequences on the in-stage mesh, priced.
PartCost trace_part(const CommonOptions& o, const LanguageModelConfig& config, int64_t layers,
                    int64_t rows, const Cluster& cluster, const DeviceMesh& full, bool bf16) {
  const LanguageModelConfig cfg = config.with_layers(layers);
  CommonOptions stage = o;
  stage.mesh = in_stage_mesh(full);
  stage.devices = 0;
  stage.batch = rows;
  std::unique_ptr<Model> model = cfg.build(o.seq, o.seed);
  model->set_recompute(o.recompute);
  model->compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  std::shared_ptr<Distribution> dist = make_distribution(stage, *model, cfg);
  model->set_distribution(dist);
  const Partition p = model->plan_training({rows, o.seq}, {rows, o.seq}, DType::I32);
  return part_cost(p, cluster, full, dist->batch_dim_name(), bf16);
}

nlohmann::json memory_json(const MemoryPrediction& m) {
  return {{"weights", m.weights},
          {"optimizer_state", m.optimizer_state},
          {"inputs", m.inputs},
          {"activations", m.activations}};
}

nlohmann::json pipeline_json(const PipelinePrediction& p, const PipelineShape& s, int64_t b,
                             double p2p_s) {
  nlohmann::json stages = nlohmann::json::array();
  for (size_t k = 0; k < p.stages.size(); ++k) {
    const StagePrediction& st = p.stages[k];
    stages.push_back({{"stage", k},
                      {"layers", {st.first_layer, st.first_layer + st.layers - 1}},
                      {"layer_count", st.layers},
                      {"microbatch_s", st.microbatch_s},
                      {"p2p_s", st.p2p_s},
                      {"optimizer_s", st.optimizer_s},
                      {"gradient_sync_s", st.sync_s},
                      {"in_flight", st.in_flight},
                      {"peak_bytes", st.memory.total()},
                      {"memory_bytes", memory_json(st.memory)}});
  }
  const StagePrediction& big = p.largest_memory();
  return {{"schedule", pipeline_schedule_name(s.schedule)},
          {"stages", s.stages},
          {"microbatches", s.microbatches},
          {"microbatch_size", b},
          {"virtual_stages", s.virtual_stages},
          {"bubble_fraction", p.bubble_fraction},
          {"p2p_bytes", p.p2p_bytes},
          {"p2p_s", p2p_s},
          {"per_stage", stages},
          {"step_s", p.step_s},
          {"pipeline_s", p.pipeline_s},
          {"optimizer_s", p.optimizer_s},
          {"gradient_sync_s", p.sync_s},
          {"tokens_per_s", p.tokens_per_s},
          {"model_flops_per_device_per_s", p.model_flops_per_device_per_s},
          {"peak_bytes_per_device", big.memory.total()},
          {"memory_bytes", memory_json(big.memory)}};
}

void print_pipeline(const PipelinePrediction& p, const PipelineShape& s, int64_t b,
                    const std::string& model, const DeviceMesh& full, const Cluster& c, bool bf16) {
  std::printf(
      "pipeline plan for %s on mesh %s (%d devices), predicted on cluster '%s' (%s; "
      "communication not overlapped)\n",
      model.c_str(), full.to_string().c_str(), full.size(), c.name.c_str(),
      bf16 ? "bf16 mixed precision" : "f32");
  std::printf(
      "schedule %s, %d stages, %lld micro-batches of %lld per replica, %d virtual stages, "
      "bubble %.3g\n\n",
      pipeline_schedule_name(s.schedule), s.stages, static_cast<long long>(s.microbatches),
      static_cast<long long>(b), s.virtual_stages, p.bubble_fraction);
  std::printf("%-6s %-10s %-14s %-12s %-12s %-12s %-9s %s\n", "stage", "layers", "per micro-b.",
              "p2p", "optimizer", "grad sync", "in flight", "memory/device");
  for (size_t k = 0; k < p.stages.size(); ++k) {
    const StagePrediction& st = p.stages[k];
    const std::string layers =
        std::to_string(st.first_layer) + "-" + std::to_string(st.first_layer + st.layers - 1);
    std::printf("%-6zu %-10s %-14.4g %-12.4g %-12.4g %-12.4g %-9.3g %s\n", k, layers.c_str(),
                st.microbatch_s, st.p2p_s, st.optimizer_s, st.sync_s, st.in_flight,
                format_in_mib(st.memory.total()).c_str());
  }
  std::printf(
      "\n  step             %.4g s (pipeline %.4g s, optimizer %.4g s, gradient sync %.4g s)\n"
      "  tokens/s         %.4g\n  model FLOP/s     %.4g per device\n"
      "  p2p send         %s per micro-batch\n",
      p.step_s, p.pipeline_s, p.optimizer_s, p.sync_s, p.tokens_per_s,
      p.model_flops_per_device_per_s, format_in_mib(p.p2p_bytes).c_str());
}

// Model FLOPs of a training step: 6 per parameter per token, plus
// attention's scores and weighted sums (plan.cc counts them alike).
double step_model_flops(const LanguageModelConfig& c, double batch, double seq) {
  return 6 * c.parameters() * batch * seq +
         12 * double(c.layers()) * batch * seq * seq * double(c.attention_width());
}

}  // namespace

void add_pipeline_flags(CLI::App* cmd, PipelineFlags& f) {
  cmd->add_option("--microbatches", f.microbatches,
                  "pipeline (mesh axis pipe): micro-batches per step; must divide --batch over "
                  "the data axis")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--microbatch-size", f.microbatch_size,
                  "pipeline: sequences per micro-batch on each data-parallel replica (default 1)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--schedule", f.schedule, "pipeline: gpipe, 1f1b (default) or interleaved");
  cmd->add_option("--virtual-stages", f.virtual_stages,
                  "pipeline: model chunks per device (--schedule interleaved)")
      ->check(CLI::PositiveNumber);
}

bool pipeline_requested(CommonOptions& o, const PipelineFlags& f) {
  const bool flags =
      f.microbatches > 0 || f.microbatch_size > 0 || !f.schedule.empty() || f.virtual_stages != 1;
  if (o.mesh.empty()) {
    AS_CHECK(!flags,
             "--microbatches, --microbatch-size, --schedule and --virtual-stages price a "
             "pipeline: give --mesh with a pipe axis (pipe=1 for micro-batches alone)");
    return false;
  }
  const DeviceMesh mesh = DeviceMesh::parse(o.mesh);
  const int pipe = mesh.axis_index("pipe");
  if (pipe < 0) {
    AS_CHECK(!flags,
             "--microbatches, --microbatch-size, --schedule and --virtual-stages price a "
             "pipeline: add a pipe axis to --mesh (pipe=1 for micro-batches alone)");
    return false;
  }
  if (mesh.axis_size(pipe) > 1 || flags) return true;
  o.mesh = in_stage_mesh(mesh);  // pipe=1 and nothing else: the plan without it
  return false;
}

namespace {

// The micro-batch count: --microbatches M of the batch, or --microbatch-size
// b sequences on each data replica (1 by default). Both must divide it:
// uneven micro-batches are not priced.
int64_t microbatch_count(const CommonOptions& o, const PipelineFlags& f, int64_t data) {
  if (f.microbatches > 0) {
    AS_CHECK(o.batch % f.microbatches == 0 && (o.batch / f.microbatches) % data == 0,
             "--microbatches ", f.microbatches, " must divide --batch ", o.batch,
             " into micro-batches that divide over data=", data,
             " (uneven micro-batches are not priced)");
    return f.microbatches;
  }
  const int64_t b = f.microbatch_size > 0 ? f.microbatch_size : 1;
  AS_CHECK(o.batch % (b * data) == 0, "--batch ", o.batch, " is no multiple of ",
           "--microbatch-size ", b, " x data=", data, " (uneven micro-batches are not priced)");
  return o.batch / (b * data);
}

int64_t data_size(const DeviceMesh& full) {
  const int a = full.axis_index("data");
  return a < 0 ? 1 : full.axis_size(a);
}

std::string fit_error(const PricedPipeline& p, const Cluster& cluster) {
  const StagePrediction& big = p.predicted.largest_memory();
  const size_t k = size_t(&big - p.predicted.stages.data());
  return cat("stage ", k, " needs ", format_in_mib(big.memory.total()), " per device (weights ",
             format_in_mib(big.memory.weights), ", optimizer state ",
             format_in_mib(big.memory.optimizer_state), ", activations ",
             format_in_mib(big.memory.activations), ") but cluster '", cluster.name, "' has ",
             format_in_mib(cluster.memory_bytes));
}

}  // namespace

PricedPipeline price_pipeline(const CommonOptions& o, const LanguageModelConfig& config,
                              const DeviceMesh& full, const PipelineShape& shape,
                              const Cluster& cluster, bool bf16) {
  const int pipe = full.axis_index("pipe");
  const int64_t data = data_size(full);
  const int64_t rows = o.batch / shape.microbatches;  // one micro-batch, every replica
  check_pipeline_shape(shape, int(config.layers()));
  PartCost block, base;
  split_parts(trace_part(o, config, 1, rows, cluster, full, bf16),
              trace_part(o, config, 2, rows, cluster, full, bf16),
              trace_part(o, config, 1, 2 * rows, cluster, full, bf16),
              trace_part(o, config, 2, 2 * rows, cluster, full, bf16), block, base);
  PricedPipeline r;
  r.mesh = full;
  r.shape = shape;
  r.microbatch_size = rows / data;
  r.stage_plan = o.plan;
  r.plan_time = o.plan_time;
  r.deterministic_plan = o.deterministic_plan;
  r.p2p_bytes =
      double(rows / data) * double(o.seq) * double(config.attention_width()) * (bf16 ? 2 : 4);
  r.p2p_s = p2p_seconds(cluster, full, pipe, r.p2p_bytes);
  r.predicted =
      predict_pipeline(block, base, int(config.layers()), shape, r.p2p_bytes, r.p2p_s,
                       double(o.batch) * double(o.seq),
                       step_model_flops(config, double(o.batch), double(o.seq)), full.size());
  r.fits = r.predicted.largest_memory().memory.total() <= cluster.memory_bytes;
  return r;
}

namespace {

// A line of --devices' explanation: the shape priced and what it came to.
std::string priced_line(const PricedPipeline& p) {
  const PipelineShape& s = p.shape;
  std::string l = cat(p.mesh.to_string(), " ", pipeline_schedule_name(s.schedule));
  if (s.virtual_stages > 1) l += cat(" v=", s.virtual_stages);
  l += cat(", ", s.microbatches, " micro-batches of ", p.microbatch_size);
  if (p.mesh.size() > s.stages)
    l += cat(", ", p.stage_plan == "auto" ? "AutoShard" : p.stage_plan, " inside the stages");
  if (p.stage_plan == "auto" && p.plan_time > 0)
    l += cat(" (--plan-time ", p.plan_time, p.deterministic_plan ? " --deterministic)" : ")");
  l += ": ";
  const double bytes = p.predicted.largest_memory().memory.total();
  return l + (p.fits ? cat(p.predicted.step_s, " s, ", format_in_mib(bytes), " per device")
                     : cat("does not fit (", format_in_mib(bytes), " per device)"));
}

// Prices candidates for choose_pipeline, keeping the fastest that fits; a
// shape the cluster or the options refuse is a line of `why`, not an error.
struct PipelineSearch {
  const CommonOptions& stage;  // the in-stage plan's options
  const LanguageModelConfig& config;
  const Cluster& cluster;
  bool bf16;
  std::vector<std::string>& why;
  std::optional<PricedPipeline> best;

  void price(const DeviceMesh& full, const PipelineShape& shape) {
    try {
      cluster.check_mesh(full);
      PricedPipeline p = price_pipeline(stage, config, full, shape, cluster, bf16);
      why.push_back(priced_line(p));
      if (p.fits && (!best || p.predicted.step_s < best->predicted.step_s)) best = std::move(p);
    } catch (const Error& e) {
      why.push_back(cat(full.to_string(), ": ", e.what()));
    }
  }
};

}  // namespace

// AutoShard's solver limit for each of the four traces that price its layouts
// inside the stages, unless --plan-time is given: 0.1 s of work, counted
// (--deterministic), so that the choice does not depend on the clock and
// `--plan auto --plan-time 0.1 --deterministic` on the chosen shape predicts
// the same step. The solver's own default (0.25 s or more per trace) made
// this pass most of the 5 s that GPT-3 175B on 1024 devices may take.
constexpr double kInsideStagesPlanTime = 0.1;

std::optional<PricedPipeline> choose_pipeline(const CommonOptions& o, int devices,
                                              const Cluster& cluster, bool bf16,
                                              std::vector<std::string>& why) {
  CommonOptions stage = o;
  const LanguageModelConfig config = model_config(stage);
  stage.devices = 0;
  stage.plan = "megatron";
  stage.bf16 = bf16;  // AutoShard inside the stages prices what the stages run
  const int layers = int(config.layers());
  const int node = cluster.links.empty() || cluster.links.front().devices_per_group <= 0
                       ? devices
                       : cluster.links.front().devices_per_group;
  PipelineSearch search{stage, config, cluster, bf16, why, std::nullopt};
  // Stages P from 2 to the blocks; tensor parallel groups T inside a node
  // (T divides the node's devices); the rest data parallel (ZeRO-1 needs
  // two or more), a micro-batch of one sequence per replica, 1F1B. Data
  // outermost, the pipe axis between.
  for (int P = 2; P <= std::min(devices, layers); ++P) {
    if (devices % P) continue;
    for (int T = 1; T <= devices / P && T <= node; ++T) {
      const int D = devices / P / T;
      if ((devices / P) % T || node % T || o.batch % D || (o.zero1 && D < 2)) continue;
      search.price(DeviceMesh({D, P, T}, {"data", "pipe", "model"}), {P, o.batch / D});
    }
  }
  if (!search.best) return std::nullopt;
  // Around the best shape: larger micro-batches, and interleaving.
  const DeviceMesh mesh = search.best->mesh;
  const PipelineShape around = search.best->shape;
  const int P = around.stages;
  const int64_t D = data_size(mesh);
  for (int64_t b : {2, 4})
    if (o.batch % (b * D) == 0 && o.batch / (b * D) >= P)
      search.price(mesh, {P, o.batch / (b * D), 1, PipelineSchedule::OneFOneB});
  if (around.microbatches % P == 0 && layers >= 2 * P)
    search.price(mesh, {P, around.microbatches, 2, PipelineSchedule::Interleaved});
  // The fastest shape again with AutoShard's layouts inside the stages in
  // place of Megatron's (Alpa's intra-operator pass, on the shape the
  // inter-operator search chose).
  if (search.best->mesh.size() > P) {
    CommonOptions planned = stage;
    planned.plan = "auto";
    if (planned.plan_time == 0) {
      planned.plan_time = kInsideStagesPlanTime;
      planned.deterministic_plan = true;
    }
    PipelineSearch inside{planned, config, cluster, bf16, why, search.best};
    inside.price(search.best->mesh, search.best->shape);
    return inside.best;
  }
  return search.best;
}

void report_pipeline(const CommonOptions& o, const PricedPipeline& p, const Cluster& cluster,
                     bool bf16, const PipelineOutput& out, const std::vector<std::string>& why) {
  nlohmann::json mesh_json = nlohmann::json::object();
  for (int a = 0; a < p.mesh.rank(); ++a)
    mesh_json[p.mesh.axis_names()[size_t(a)]] = p.mesh.axis_size(a);
  nlohmann::json j = {
      {"mesh", mesh_json},
      {"plan", p.stage_plan},
      {"predicted", pipeline_json(p.predicted, p.shape, p.microbatch_size, p.p2p_s)}};
  if (p.stage_plan == "auto" && p.plan_time > 0) {
    j["plan_time"] = p.plan_time;
    j["deterministic"] = p.deterministic_plan;
  }
  if (!why.empty()) j["reasons"] = why;
  if (!out.out.empty()) write_output_file(out.out, "--out", j.dump(2) + "\n", out.overwrite);
  if (out.json) {
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  print_pipeline(p.predicted, p.shape, p.microbatch_size, o.model, p.mesh, cluster, bf16);
  if (why.empty()) return;
  std::printf("\nwhy:\n");
  for (const std::string& l : why) std::printf("  %s\n", l.c_str());
}

void run_pipeline_plan(CommonOptions& o, const PipelineFlags& f, const PipelineOutput& out) {
  const DeviceMesh full = DeviceMesh::parse(o.mesh);
  AS_CHECK(out.predict, "--mesh ", o.mesh,
           ": plan prices a pipe axis only as a prediction; add --predict (and --cluster)");
  AS_CHECK(o.devices == 0, "give either --mesh or --devices, not both");
  AS_CHECK(!names_keras_model(o.model), "--mesh ", o.mesh, ": the pipe axis is for language ",
           "models (a preset, config or model directory), not Keras model files");
  AS_CHECK(!f.schedule.empty() || f.virtual_stages == 1,
           "--virtual-stages needs --schedule interleaved");
  AS_CHECK(f.microbatches == 0 || f.microbatch_size == 0,
           "give either --microbatches or --microbatch-size, not both");
  const LanguageModelConfig config = model_config(o);
  const bool bf16 = out.dtype == "bf16";
  o.bf16 = bf16;
  const Cluster cluster = Cluster::for_this_run(o.cluster, o.hosts);
  cluster.check_mesh(full);
  PipelineShape shape;
  shape.stages = full.axis_size(full.axis_index("pipe"));
  shape.schedule = parse_pipeline_schedule(f.schedule.empty() ? "1f1b" : f.schedule);
  shape.virtual_stages = f.virtual_stages;
  shape.microbatches = microbatch_count(o, f, data_size(full));
  const PricedPipeline p = price_pipeline(o, config, full, shape, cluster, bf16);
  AS_CHECK(p.fits, "the plan does not fit: ", fit_error(p, cluster),
           "; use more stages or devices, a smaller --microbatch-size, --schedule 1f1b, "
           "--recompute or --dtype bf16");
  report_pipeline(o, p, cluster, bf16, out, {});
}

}  // namespace autoshard::cli
