// The report of a plan, as `autoshard plan --json` prints it and
// autoshard.plan (Python) returns it: one function builds it for both, so
// the two give the same keys and figures for the same Partition.
//
//   {"mesh": {axis: size}, "parameters": {path: {"shape", "layout",
//    "bytes_per_device"}}, "collectives": [{"kind", "axis", "value",
//    "bytes"}], "bytes_per_device": {"weights", "optimizer_state",
//    "activations", "total"}}
//
// Callers add "reasons" (AutoShard's), "predicted" (prediction_report) and
// their own keys.
#pragma once

#include <nlohmann/json.hpp>

#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

// Per weight (not the optimizer slots): its global shape, layout (a mesh
// axis name or null per dimension) and the bytes of its largest block; per
// device: weights, optimizer state and the planned buffers of the step, the
// largest over the lowered devices. `p` must have been lowered.
nlohmann::json plan_report(const Partition& p);

// The cost model's prediction as the report's "predicted" object.
nlohmann::json prediction_report(const StepPrediction& p);

// The memory of the process that runs every device of `all` (a partition
// lowered for this process's devices): in-process devices share it.
double in_process_bytes(const Partition& all, const Cluster& c, bool bf16);

}  // namespace autoshard
