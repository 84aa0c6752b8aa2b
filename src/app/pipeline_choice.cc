#include "autoshard/app/pipeline_choice.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/runtime/memory.h"

namespace autoshard {
namespace {

// Prices candidates for choose_pipeline, keeping the fastest that fits; a
// shape the cluster or the options refuse is a line of `why`, not an error.
struct PipelineSearch {
  const PipelineRun& run;
  const LanguageModelConfig& config;
  std::vector<std::string>& why;
  std::optional<PricedPipeline> best;

  void price(const DeviceMesh& full, const PipelineShape& shape) {
    try {
      run.cluster.check_mesh(full);
      PricedPipeline p = price_pipeline(run, config, full, shape);
      why.push_back("pipeline " + priced_line(p));
      if (p.fits && (!best || p.predicted.step_s < best->predicted.step_s)) best = std::move(p);
    } catch (const Error& e) {
      why.push_back(cat("pipeline ", full.to_string(), ": ", e.what()));
    }
  }
};

// The devices of a node: tensor parallel groups stay inside one.
int node_devices(const Cluster& c, int devices) {
  return c.links.empty() || c.links.front().devices_per_group <= 0
             ? devices
             : c.links.front().devices_per_group;
}

// Stages P from 2 to the blocks; tensor parallel groups T inside a node (T
// divides the node's devices); the rest data parallel (ZeRO-1 needs two or
// more), a micro-batch of one sequence per replica, 1F1B. Data outermost,
// the pipe axis between.
void price_every_shape(PipelineSearch& search, int devices, int layers) {
  const PipelineRun& run = search.run;
  const int node = node_devices(run.cluster, devices);
  for (int P = 2; P <= std::min(devices, layers); ++P) {
    if (devices % P) continue;
    for (int T = 1; T <= devices / P && T <= node; ++T) {
      const int D = devices / P / T;
      if ((devices / P) % T || node % T || run.batch % D || (run.zero1 && D < 2)) continue;
      search.price(DeviceMesh({D, P, T}, {"data", "pipe", "model"}), {P, run.batch / D});
    }
  }
}

// Around the best shape: larger micro-batches, and interleaving.
void price_around_the_best(PipelineSearch& search, int layers) {
  const DeviceMesh mesh = search.best->mesh;
  const PipelineShape around = search.best->shape;
  const int P = around.stages;
  const int64_t D = data_parallel_size(mesh);
  const int64_t batch = search.run.batch;
  for (int64_t b : {2, 4})
    if (batch % (b * D) == 0 && batch / (b * D) >= P)
      search.price(mesh, {P, batch / (b * D), 1, PipelineSchedule::OneFOneB});
  if (around.microbatches % P == 0 && layers >= 2 * P)
    search.price(mesh, {P, around.microbatches, 2, PipelineSchedule::Interleaved});
}

}  // namespace

std::optional<PricedPipeline> choose_pipeline(const PipelineRun& run,
                                              const LanguageModelConfig& config, int devices,
                                              std::vector<std::string>& why) {
  PipelineRun megatron = run;
  megatron.stage_plan = "megatron";
  const int layers = int(config.layers());
  PipelineSearch search{megatron, config, why, std::nullopt};
  price_every_shape(search, devices, layers);
  if (!search.best) return std::nullopt;
  price_around_the_best(search, layers);
  // The fastest shape again with AutoShard's layouts inside the stages in
  // place of Megatron's (Alpa's intra-operator pass, on the shape the
  // inter-operator search chose).
  if (search.best->mesh.size() == search.best->shape.stages) return search.best;
  PipelineRun planned = megatron;
  planned.stage_plan = "auto";
  planned.autoshard.bf16 = run.bf16;  // AutoShard prices what the stages run
  if (planned.autoshard.time_limit_s == 0) {
    planned.autoshard.time_limit_s = kInsideStagesPlanTime;
    planned.autoshard.deterministic = true;
  }
  PipelineSearch inside{planned, config, why, search.best};
  inside.price(search.best->mesh, search.best->shape);
  return inside.best;
}

bool pipeline_is_faster(const PricedPipeline& piped, const UnpipedStep& unpiped) {
  return !unpiped.fits || piped.predicted.step_s < unpiped.step_s;
}

std::string unpiped_line(const UnpipedStep& u) {
  return cat("without a pipe axis: ", u.mesh, " ", u.step_s, " s, ", format_in_mib(u.bytes),
             " per device", u.fits ? "" : " (does not fit)");
}

}  // namespace autoshard
