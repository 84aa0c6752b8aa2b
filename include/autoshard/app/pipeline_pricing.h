// A language model's training step as a pipeline, priced: the mesh with its
// pipe axis, the schedule and micro-batches (plan/pipeline.h says how a
// step is priced from traces of one and two blocks), each stage laid out by
// a named plan (app/named_distribution.h) over the axes beside pipe. What
// `autoshard plan --predict` prints for a pipe axis, and what
// app/pipeline_choice.h compares.
//
//   PipelineRun run{.batch = 1536, .seq = 2048, .bf16 = true, .recompute = true};
//   run.cluster = Cluster::named("a100-80g");
//   PricedPipeline p = price_pipeline(run, LanguageModelConfig::of("gpt3-175b"),
//                                     DeviceMesh::parse("data=8,pipe=16,model=8"),
//                                     {.stages = 16, .microbatches = 192});
//   p.predicted.step_s;  p.fits;  pipeline_report(p);  // as plan --json
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/models/language_model.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/pipeline.h"

namespace autoshard {

// The run a pipeline is priced for: the step's batch, its model's options,
// and how each stage is laid out and priced.
struct PipelineRun {
  int64_t batch = 8, seq = 128;  // sequences per step, tokens per sequence
  uint64_t seed = 0;
  bool recompute = false;  // each block's forward pass again in the backward
  bool zero1 = false;      // optimizer state split over the data axis
  bool bf16 = false;       // priced as mixed precision
  // The layout inside each stage: a name as `--plan` takes (auto, megatron, ...).
  std::string stage_plan = "megatron";
  // AutoShard's options inside the stages (`stage_plan` auto): its solver's
  // limits (--plan-time, --deterministic) and the cluster it prices on.
  AutoShardOptions autoshard;
  Cluster cluster;  // what the step is priced on
  // Bytes each device may hold (0: the cluster's device memory).
  double memory_per_device = 0;
  double memory_limit() const {
    return memory_per_device > 0 ? memory_per_device : cluster.memory_bytes;
  }
};

// A pipeline priced on a cluster: the mesh (with its pipe axis), the
// schedule, sequences per micro-batch on each data replica, the prediction.
struct PricedPipeline {
  DeviceMesh mesh;
  PipelineShape shape;
  int64_t microbatch_size = 1;
  std::string stage_plan;  // the layout inside each stage
  // AutoShard's solver limits inside the stages (--plan-time, --deterministic).
  double plan_time = 0;
  bool deterministic_plan = false;
  PipelinePrediction predicted;
  double p2p_bytes = 0, p2p_s = 0;  // one send
  bool fits = false;                // every stage within the device's memory
};

// The mesh without its pipe axis ("data=1,model=1" when nothing is left).
DeviceMesh in_stage_mesh(const DeviceMesh& full);

// The data axis's size on `full` (1 without one).
int64_t data_parallel_size(const DeviceMesh& full);

// Prices `shape` on `full` for `run`'s batch and sequence, each stage laid
// out by `run.stage_plan` over the axes beside pipe.
PricedPipeline price_pipeline(const PipelineRun& run, const LanguageModelConfig& config,
                              const DeviceMesh& full, const PipelineShape& shape);

// One line saying which stage does not fit, with what, against `limit` bytes
// from `where` ("cluster 'a100-80g'").
std::string pipeline_fit_error(const PricedPipeline& p, double limit, const std::string& where);

// One line of a choice's explanation: the shape priced and what it came to.
std::string priced_line(const PricedPipeline& p);

// The report `autoshard plan --json --predict` prints for a pipeline: mesh,
// stage plan, prediction (per stage, step, memory), solver limits inside
// the stages, and `why` as "reasons" when given.
nlohmann::json pipeline_report(const PricedPipeline& p, const std::vector<std::string>& why = {});

}  // namespace autoshard
