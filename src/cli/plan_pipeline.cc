#include "cli/plan_pipeline.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/runtime/memory.h"
#include "cli/keras_command.h"
#include "cli/output_file.h"

namespace autoshard::cli {

namespace {

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
  o.mesh = in_stage_mesh(mesh).to_string();  // pipe=1 and nothing else: the plan without it
  return false;
}

PipelineRun pipeline_run(const CommonOptions& o, const Cluster& cluster, bool bf16) {
  PipelineRun run;
  run.batch = o.batch;
  run.seq = o.seq;
  run.seed = o.seed;
  run.recompute = o.recompute;
  run.zero1 = o.zero1;
  run.bf16 = bf16;
  run.stage_plan = o.plan;
  run.autoshard = {.cluster = o.cluster,
                   .hosts = o.hosts,
                   .bf16 = bf16,
                   .memory_per_device = o.memory_per_device,
                   .time_limit_s = o.plan_time,
                   .deterministic = o.deterministic_plan,
                   .divisible = o.divisible};
  run.cluster = cluster;
  return run;
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

}  // namespace

void report_pipeline(const CommonOptions& o, const PricedPipeline& p, const Cluster& cluster,
                     bool bf16, const PipelineOutput& out, const std::vector<std::string>& why) {
  const nlohmann::json j = pipeline_report(p, why);
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
  shape.microbatches = microbatch_count(o, f, data_parallel_size(full));
  const PipelineRun run = pipeline_run(o, cluster, bf16);
  const PricedPipeline p = price_pipeline(run, config, full, shape);
  AS_CHECK(p.fits, "the plan does not fit: ",
           pipeline_fit_error(p, run.memory_limit(), "cluster '" + cluster.name + "'"),
           "; use more stages or devices, a smaller --microbatch-size, --schedule 1f1b, "
           "--recompute or --dtype bf16");
  report_pipeline(o, p, cluster, bf16, out, {});
}

}  // namespace autoshard::cli
