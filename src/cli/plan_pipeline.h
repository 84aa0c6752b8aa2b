// `autoshard plan --predict` on a mesh with a `pipe` axis: the pipeline's
// step time and memory per stage (plan/pipeline.h), for clusters; `train`
// runs such meshes here (nn/pipeline.h).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/plan/pipeline.h"
#include "cli/options.h"

namespace autoshard::cli {

struct PipelineFlags {
  int64_t microbatches = 0;     // 0: from --microbatch-size
  int64_t microbatch_size = 0;  // per data-parallel replica; 0: 1 when nothing is given
  std::string schedule;         // empty: 1f1b
  int virtual_stages = 1;
};

// Where plan prints and writes the result.
struct PipelineOutput {
  bool json = false, predict = false, overwrite = false;
  std::string out, dtype;
};

void add_pipeline_flags(CLI::App* cmd, PipelineFlags& f);

// The mesh without its pipe axis, as --mesh text ("data=1,model=1" when
// nothing is left).
std::string in_stage_mesh(const DeviceMesh& full);

// Whether the plan is a pipeline's: a pipe axis, or a pipeline flag given.
// A pipe axis of size 1 without any flag is dropped from o.mesh (the plan
// is then exactly the one without it).
bool pipeline_requested(CommonOptions& o, const PipelineFlags& f);

void run_pipeline_plan(CommonOptions& o, const PipelineFlags& f, const PipelineOutput& out);

// A pipeline priced on a cluster: the mesh (with its pipe axis), the
// schedule, sequences per micro-batch on each data replica, the prediction.
struct PricedPipeline {
  DeviceMesh mesh;
  PipelineShape shape;
  int64_t microbatch_size = 1;
  std::string stage_plan;  // the layout inside each stage (--plan)
  // AutoShard's solver limits inside the stages (--plan-time, --deterministic).
  double plan_time = 0;
  bool deterministic_plan = false;
  PipelinePrediction predicted;
  double p2p_bytes = 0, p2p_s = 0;  // one send
  bool fits = false;                // every stage within the device's memory
};

// Prices `shape` on `full` for `o`'s model, batch and sequence, each stage
// laid out by `o.plan` over the axes beside pipe.
PricedPipeline price_pipeline(const CommonOptions& o, const LanguageModelConfig& config,
                              const DeviceMesh& full, const PipelineShape& shape,
                              const Cluster& cluster, bool bf16);

// What --devices N considers beside the meshes without a pipe axis: every
// pipeline data=D,pipe=P,model=T of N devices (2 <= P <= the blocks, tensor
// parallel groups T inside a node, Megatron's layout in each stage, 1F1B,
// one sequence per micro-batch and replica), then around the fastest that
// fits, micro-batches of 2 and 4 and the interleaved schedule (v = 2). The
// fastest that fits, or none; `why` gets one line per shape priced.
std::optional<PricedPipeline> choose_pipeline(const CommonOptions& o, int devices,
                                              const Cluster& cluster, bool bf16,
                                              std::vector<std::string>& why);

// Prints (or writes as JSON, with `why` as "reasons") a priced pipeline.
void report_pipeline(const CommonOptions& o, const PricedPipeline& p, const Cluster& cluster,
                     bool bf16, const PipelineOutput& out, const std::vector<std::string>& why);

}  // namespace autoshard::cli
