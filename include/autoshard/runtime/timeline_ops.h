// How a timeline names and annotates the ops of one device's program: the
// same for a measured step (runtime/timeline.h) and a predicted one
// (plan/predicted_timeline.h), so the two open side by side.
//
// A slice is named "<op> <layer path>" ("Einsum h.0.attn.c_attn"): the path
// is that of the weight the op reads, else the one its first input carries
// (forward ops inherit their layer's path), and a weight's gradient takes
// the weight's path (the product that makes it reads no weight). Its
// arguments hold the shapes, the FLOPs and bytes the cost model counts, and
// for collectives the bytes moved and the mesh axis.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard {

struct TimelineOp {
  std::string name;      // "Einsum h.0.attn.c_attn"
  std::string category;  // "compute" or "collective"
  nlohmann::json args;   // shapes, flops, bytes (collectives: axis, bytes)
};

struct ProgramDescription {
  std::vector<TimelineOp> ops;  // per node (empty for leaves)
  // Bytes of the values alive after each node runs: every leaf (weights,
  // optimizer state, inputs) and the intermediate values not yet read for
  // the last time. The executor's buffers hold them (with reuse).
  std::vector<double> live_bytes;
  bool updates = false;  // the program updates weights (a training step)
};

// `outputs` are the values kept after the run; `axis_names` the mesh's
// (empty on one device).
ProgramDescription describe_program(const Graph& g, const std::vector<int>& outputs,
                                    const std::vector<std::string>& axis_names);

}  // namespace autoshard
