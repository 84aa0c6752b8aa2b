#include "autoshard/app/pipeline_pricing.h"

#include <algorithm>

#include "autoshard/app/named_distribution.h"
#include "autoshard/error.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/runtime/memory.h"

namespace autoshard {

DeviceMesh in_stage_mesh(const DeviceMesh& full) {
  std::vector<int> sizes;
  std::vector<std::string> names;
  for (int a = 0; a < full.rank(); ++a) {
    if (full.axis_names()[size_t(a)] == "pipe") continue;
    sizes.push_back(full.axis_size(a));
    names.push_back(full.axis_names()[size_t(a)]);
  }
  if (sizes.empty()) return DeviceMesh({1, 1}, {"data", "model"});
  return DeviceMesh(sizes, names);
}

int64_t data_parallel_size(const DeviceMesh& full) {
  const int a = full.axis_index("data");
  return a < 0 ? 1 : full.axis_size(a);
}

namespace {

// --zero1 splits optimizer state over the data axis: a stage without one
// (of more than one device) would ignore it.
void check_zero1_inside(const PipelineRun& run, const DeviceMesh& inside) {
  if (!run.zero1) return;
  AS_CHECK(data_parallel_size(inside) > 1, "--zero1 splits optimizer state over the data axis, ",
           "but the mesh ", inside.to_string(), " has none of more than one device; give one ",
           "(e.g. --mesh data=2) or drop --zero1");
}

// What AutoShard may plan a trace under: the memory of the stage it stands
// for. A stage's device holds up to `stage_blocks` blocks at one
// micro-batch in its memory M; a trace of t blocks at x micro-batches is
// max(1, t / stage_blocks) x x such stages' worth, so it gets that many
// times M. (One device's memory for every trace refused plans whose stages
// fit: the trace of two blocks at twice the micro-batch is larger than a
// stage of two blocks.) The pipeline's prediction then checks each stage
// against M itself.
AutoShardOptions trace_budget(const PipelineRun& run, int64_t layers, int stage_blocks,
                              int64_t multiple) {
  AutoShardOptions o = run.autoshard;
  const double device = o.memory_per_device > 0 ? o.memory_per_device : run.cluster.memory_bytes;
  const double stages = std::max(1.0, double(layers) / double(stage_blocks));
  if (device > 0) o.memory_per_device = device * stages * double(multiple);
  return o;
}

// One trace: the model with `layers` blocks, `multiple` micro-batches of
// `rows` sequences on the in-stage mesh, priced.
PartCost trace_part(const PipelineRun& run, const LanguageModelConfig& config, int64_t layers,
                    int64_t rows, int64_t multiple, const DeviceMesh& full) {
  const LanguageModelConfig cfg = config.with_layers(layers);
  std::unique_ptr<Model> model = cfg.build(run.seq, run.seed);
  model->set_recompute(run.recompute);
  model->compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  const DeviceMesh inside = in_stage_mesh(full);
  check_zero1_inside(run, inside);
  const int stages = full.axis_size(full.axis_index("pipe"));
  const int stage_blocks = int((config.layers() + stages - 1) / stages);
  std::shared_ptr<Distribution> dist = named_distribution(
      run.stage_plan, inside, cfg, trace_budget(run, layers, stage_blocks, multiple));
  dist->zero1 = run.zero1;
  model->set_distribution(dist);
  const Shape x{rows * multiple, run.seq};
  const Partition p = model->plan_training(x, x, DType::I32);
  return part_cost(p, run.cluster, full, dist->batch_dim_name(), run.bf16);
}

// Model FLOPs of a training step: 6 per parameter per token, plus
// attention's scores and weighted sums (as `autoshard plan` counts them).
double step_model_flops(const LanguageModelConfig& c, double batch, double seq) {
  return 6 * c.parameters() * batch * seq +
         12 * double(c.layers()) * batch * seq * seq * double(c.attention_width());
}

}  // namespace

PricedPipeline price_pipeline(const PipelineRun& run, const LanguageModelConfig& config,
                              const DeviceMesh& full, const PipelineShape& shape) {
  const int pipe = full.axis_index("pipe");
  const int64_t data = data_parallel_size(full);
  const int64_t rows = run.batch / shape.microbatches;  // one micro-batch, every replica
  check_pipeline_shape(shape, int(config.layers()));
  PartCost block, base;
  split_parts(trace_part(run, config, 1, rows, 1, full), trace_part(run, config, 2, rows, 1, full),
              trace_part(run, config, 1, rows, 2, full), trace_part(run, config, 2, rows, 2, full),
              block, base);
  PricedPipeline r;
  r.mesh = full;
  r.shape = shape;
  r.microbatch_size = rows / data;
  r.stage_plan = run.stage_plan;
  r.plan_time = run.autoshard.time_limit_s;
  r.deterministic_plan = run.autoshard.deterministic;
  r.p2p_bytes =
      double(rows / data) * double(run.seq) * double(config.attention_width()) * (run.bf16 ? 2 : 4);
  r.p2p_s = p2p_seconds(run.cluster, full, pipe, r.p2p_bytes);
  r.predicted =
      predict_pipeline(block, base, int(config.layers()), shape, r.p2p_bytes, r.p2p_s,
                       double(run.batch) * double(run.seq),
                       step_model_flops(config, double(run.batch), double(run.seq)), full.size());
  r.fits = r.predicted.largest_memory().memory.total() <= run.memory_limit();
  return r;
}

std::string pipeline_fit_error(const PricedPipeline& p, double limit, const std::string& where) {
  const StagePrediction& big = p.predicted.largest_memory();
  const size_t k = size_t(&big - p.predicted.stages.data());
  return cat("stage ", k, " needs ", format_in_mib(big.memory.total()), " per device (weights ",
             format_in_mib(big.memory.weights), ", optimizer state ",
             format_in_mib(big.memory.optimizer_state), ", activations ",
             format_in_mib(big.memory.activations), ") but ", where, " has ", format_in_mib(limit));
}

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

namespace {

nlohmann::json memory_json(const MemoryPrediction& m) {
  return {{"weights", m.weights},
          {"optimizer_state", m.optimizer_state},
          {"inputs", m.inputs},
          {"activations", m.activations}};
}

nlohmann::json stages_json(const PipelinePrediction& p) {
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
  return stages;
}

nlohmann::json prediction_json(const PricedPipeline& priced) {
  const PipelinePrediction& p = priced.predicted;
  const PipelineShape& s = priced.shape;
  const StagePrediction& big = p.largest_memory();
  return {{"schedule", pipeline_schedule_name(s.schedule)},
          {"stages", s.stages},
          {"microbatches", s.microbatches},
          {"microbatch_size", priced.microbatch_size},
          {"virtual_stages", s.virtual_stages},
          {"bubble_fraction", p.bubble_fraction},
          {"p2p_bytes", p.p2p_bytes},
          {"p2p_s", priced.p2p_s},
          {"per_stage", stages_json(p)},
          {"step_s", p.step_s},
          {"pipeline_s", p.pipeline_s},
          {"optimizer_s", p.optimizer_s},
          {"gradient_sync_s", p.sync_s},
          {"tokens_per_s", p.tokens_per_s},
          {"model_flops_per_device_per_s", p.model_flops_per_device_per_s},
          {"peak_bytes_per_device", big.memory.total()},
          {"memory_bytes", memory_json(big.memory)}};
}

}  // namespace

nlohmann::json pipeline_report(const PricedPipeline& p, const std::vector<std::string>& why) {
  nlohmann::json mesh = nlohmann::json::object();
  for (int a = 0; a < p.mesh.rank(); ++a)
    mesh[p.mesh.axis_names()[size_t(a)]] = p.mesh.axis_size(a);
  nlohmann::json j = {{"mesh", mesh}, {"plan", p.stage_plan}, {"predicted", prediction_json(p)}};
  if (p.stage_plan == "auto" && p.plan_time > 0) {
    j["plan_time"] = p.plan_time;
    j["deterministic"] = p.deterministic_plan;
  }
  if (!why.empty()) j["reasons"] = why;
  return j;
}

}  // namespace autoshard
