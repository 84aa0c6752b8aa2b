#include "cli/plan_pipeline.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <variant>

#include "autoshard/error.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/pipeline.h"
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

LanguageModelConfig with_layers(LanguageModelConfig c, int64_t layers) {
  std::visit(
      [&](auto& m) {
        if constexpr (requires { m.n_layer; })
          m.n_layer = layers;
        else
          m.num_hidden_layers = layers;
      },
      c.config);
  return c;
}

// One trace: the model with `layers` blocks, one micro-batch of `rows`
// sequences on the in-stage mesh, priced.
PartCost trace_part(const CommonOptions& o, const LanguageModelConfig& config, int64_t layers,
                    int64_t rows, const Cluster& cluster, const DeviceMesh& full, bool bf16) {
  const LanguageModelConfig cfg = with_layers(config, layers);
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

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  return buf;
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
                mib(st.memory.total()).c_str());
  }
  std::printf(
      "\n  step             %.4g s (pipeline %.4g s, optimizer %.4g s, gradient sync %.4g s)\n"
      "  tokens/s         %.4g\n  model FLOP/s     %.4g per device\n"
      "  p2p send         %s per micro-batch\n",
      p.step_s, p.pipeline_s, p.optimizer_s, p.sync_s, p.tokens_per_s,
      p.model_flops_per_device_per_s, mib(p.p2p_bytes).c_str());
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

void run_pipeline_plan(CommonOptions& o, const PipelineFlags& f, const PipelineOutput& out) {
  const DeviceMesh full = DeviceMesh::parse(o.mesh);
  const int pipe = full.axis_index("pipe");
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
  const Cluster cluster = Cluster::named(o.cluster);
  cluster.check_mesh(full);
  // The micro-batch: --microbatches M of the batch, or --microbatch-size b
  // sequences on each data replica (1 by default). Both must divide it:
  // uneven micro-batches are not priced.
  const int data_axis = full.axis_index("data");
  const int64_t data = data_axis < 0 ? 1 : full.axis_size(data_axis);
  PipelineShape shape;
  shape.stages = full.axis_size(pipe);
  shape.schedule = parse_pipeline_schedule(f.schedule.empty() ? "1f1b" : f.schedule);
  shape.virtual_stages = f.virtual_stages;
  if (f.microbatches > 0) {
    AS_CHECK(o.batch % f.microbatches == 0 && (o.batch / f.microbatches) % data == 0,
             "--microbatches ", f.microbatches, " must divide --batch ", o.batch,
             " into micro-batches that divide over data=", data,
             " (uneven micro-batches are not priced)");
    shape.microbatches = f.microbatches;
  } else {
    const int64_t b = f.microbatch_size > 0 ? f.microbatch_size : 1;
    AS_CHECK(o.batch % (b * data) == 0, "--batch ", o.batch, " is no multiple of ",
             "--microbatch-size ", b, " x data=", data, " (uneven micro-batches are not priced)");
    shape.microbatches = o.batch / (b * data);
  }
  const int64_t rows = o.batch / shape.microbatches;  // one micro-batch, every replica
  check_pipeline_shape(shape, int(config.layers()));
  PartCost block, base;
  split_parts(trace_part(o, config, 1, rows, cluster, full, bf16),
              trace_part(o, config, 2, rows, cluster, full, bf16),
              trace_part(o, config, 1, 2 * rows, cluster, full, bf16),
              trace_part(o, config, 2, 2 * rows, cluster, full, bf16), block, base);
  const double p2p_bytes =
      double(rows / data) * double(o.seq) * double(config.attention_width()) * (bf16 ? 2 : 4);
  const double p2p_s = p2p_seconds(cluster, full, pipe, p2p_bytes);
  const PipelinePrediction p = predict_pipeline(
      block, base, int(config.layers()), shape, p2p_bytes, p2p_s, double(o.batch) * double(o.seq),
      step_model_flops(config, double(o.batch), double(o.seq)), full.size());
  const StagePrediction& big = p.largest_memory();
  const size_t big_k = size_t(&big - p.stages.data());
  AS_CHECK(big.memory.total() <= cluster.memory_bytes, "the plan does not fit: stage ", big_k,
           " needs ", mib(big.memory.total()), " per device (weights ", mib(big.memory.weights),
           ", optimizer state ", mib(big.memory.optimizer_state), ", activations ",
           mib(big.memory.activations), ") but cluster '", cluster.name, "' has ",
           mib(cluster.memory_bytes),
           "; use more stages or devices, a smaller --microbatch-size, --schedule 1f1b, "
           "--recompute or --dtype bf16");
  nlohmann::json mesh_json = nlohmann::json::object();
  for (int a = 0; a < full.rank(); ++a) mesh_json[full.axis_names()[size_t(a)]] = full.axis_size(a);
  const int64_t b = rows / data;
  const nlohmann::json j = {
      {"mesh", mesh_json}, {"plan", o.plan}, {"predicted", pipeline_json(p, shape, b, p2p_s)}};
  if (!out.out.empty()) write_output_file(out.out, "--out", j.dump(2) + "\n", out.overwrite);
  if (out.json)
    std::printf("%s\n", j.dump(2).c_str());
  else
    print_pipeline(p, shape, b, o.model, full, cluster, bf16);
}

}  // namespace autoshard::cli
