// Which pipeline of N devices to run a language model's step on, if any:
// what `autoshard plan --devices N --predict`, `autoshard train --devices N`
// and Python's `autoshard.plan(model, N)` consider beside AutoShard's plan
// without a pipe axis (docs/pipeline.md, "What the planner chooses").
//
//   std::vector<std::string> why;
//   std::optional<PricedPipeline> piped = choose_pipeline(run, config, 1024, why);
//   if (piped && pipeline_is_faster(*piped, unpiped)) ...  // else the plan without
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autoshard/app/pipeline_pricing.h"

namespace autoshard {

// AutoShard's solver limit for each of the four traces that price its
// layouts inside the stages, unless `run.autoshard.time_limit_s` is given:
// this much work, counted (deterministic), so that the choice does not
// depend on the clock and `--plan auto --plan-time 0.1 --deterministic` on
// the chosen shape predicts the same step.
constexpr double kInsideStagesPlanTime = 0.1;

// Every pipeline data=D,pipe=P,model=T of `devices` (2 <= P <= the blocks,
// tensor parallel groups T inside a node of run.cluster, Megatron's layout
// in each stage, 1F1B, one sequence per micro-batch and replica), then
// around the fastest that fits, micro-batches of 2 and 4 and the
// interleaved schedule (v = 2), then the fastest again with AutoShard's
// layouts inside the stages. Returns the fastest that fits, or none;
// `why` gets one line per shape priced ("pipeline data=...: ..."): a shape
// the cluster or the options refuse is a line, not an error.
// run.stage_plan is not read.
std::optional<PricedPipeline> choose_pipeline(const PipelineRun& run,
                                              const LanguageModelConfig& config, int devices,
                                              std::vector<std::string>& why);

// The plan without a pipe axis, as the choice compares it.
struct UnpipedStep {
  std::string mesh;
  double step_s = 0;
  double bytes = 0;  // per device, the largest
  bool fits = false;
};

// The pipeline is taken where the plan without a pipe axis does not fit or
// is slower (equal times keep the plan without).
bool pipeline_is_faster(const PricedPipeline& piped, const UnpipedStep& unpiped);

// "without a pipe axis: data=2,model=2 1.5 s, 30 MiB per device": the line
// that ends a pipeline's reasons.
std::string unpiped_line(const UnpipedStep& unpiped);

}  // namespace autoshard
