// `autoshard plan --predict` on a mesh with a `pipe` axis: the pipeline's
// step time and memory per stage (app/pipeline_pricing.h), for clusters;
// `train` runs such meshes here (nn/pipeline.h).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/app/pipeline_pricing.h"
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

// Whether the plan is a pipeline's: a pipe axis, or a pipeline flag given.
// A pipe axis of size 1 without any flag is dropped from o.mesh (the plan
// is then exactly the one without it).
bool pipeline_requested(CommonOptions& o, const PipelineFlags& f);

void run_pipeline_plan(CommonOptions& o, const PipelineFlags& f, const PipelineOutput& out);

// The run app/pipeline_pricing.h prices for the options: batch, sequence,
// recompute, ZeRO-1, the layout inside the stages (--plan) and AutoShard's
// options there, on `cluster`.
PipelineRun pipeline_run(const CommonOptions& o, const Cluster& cluster, bool bf16);

// Prints (or writes as JSON, with `why` as "reasons") a priced pipeline.
void report_pipeline(const CommonOptions& o, const PricedPipeline& p, const Cluster& cluster,
                     bool bf16, const PipelineOutput& out, const std::vector<std::string>& why);

}  // namespace autoshard::cli
