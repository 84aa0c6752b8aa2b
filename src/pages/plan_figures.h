// The figures behind the picture of a plan (plan_html.h) that the plan's
// report (autoshard/pages/plan_report.h) does not hold: the mesh's axes in
// order, the weights in the model's order, the cost model's step broken
// down by op kind and by mesh axis, and the bytes each lowered device holds
// at each position of its program.
//
//   {"mesh_axes": [[name, size], ...], "weights": [path, ...],
//    "cluster": name, "step_s", "compute_s", "communication_s",
//    "by_op": {kind: seconds}, "by_axis": {axis: seconds},
//    "memory": {"positions": n, "planned_bytes": bytes,
//               "devices": [{"device": d, "at": [position, ...],
//                            "bytes": [bytes, ...]}]}}
//
// by_op holds each op kind's compute (op_seconds, scaled so that the kinds
// add up to the prediction's compute where the cluster times stretches of
// work together) and each collective kind as "all_reduce over model";
// by_axis the collectives' seconds per mesh axis. Memory at a position is
// the device's weights, optimizer state and inputs plus every value computed
// and not yet read for the last time (views share their source's bytes);
// "planned_bytes" is device 0's total with the executor's buffer plan
// (buffers reused, so it can exceed the live peak). At most kMemoryPoints
// positions per device are kept (each the largest of its stretch).
#pragma once

#include <nlohmann/json.hpp>

#include "autoshard/plan/cluster.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

constexpr int kMemoryPoints = 400;
constexpr int kMemoryDevices = 8;  // the first lowered devices drawn

// `p` must have been lowered (device 0 at least).
nlohmann::json plan_figures(const Partition& p, const Cluster& c, bool bf16);

}  // namespace autoshard
