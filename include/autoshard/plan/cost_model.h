// The cost model: predicted step time and memory per device of a
// partitioned step on a Cluster, from each op's own cost (ir/ops) and the
// collectives the partitioner inserted (priced by the link each mesh axis
// crosses). The planner prices its strategies with the same functions.
//
//   compute  = sum over the device's ops of max(FLOPs / (peak x fraction),
//              bytes / (bandwidth x efficiency)) + a per-op overhead;
//              matrix products take their fraction from the GEMM curve
//   collectives (ring, alpha-beta, the largest block sets the pace), n the
//   axis size, B the whole buffer, b the largest block, a and w the
//   link's latency and effective bandwidth:
//     all-reduce      2 (n - 1) a + 2 (n - 1) / n * B / w
//     all-gather,
//     reduce-scatter  (n - 1) (a + b / w)
//   memory   = weights + optimizer state + inputs + the executor's planned
//              buffers (activations and gradients, with their reuse)
// Gradient buckets (runtime/overlap.h, on unless set_overlap_options turns
// them off) overlap compute: each bucket's all-reduce starts when the
// backward pass has made its last gradient, after the buckets before it,
// and the first op that reads it waits for it, so the step is
//   max over that timeline of (ops and blocking collectives, bucket lane)
// rather than their sum; every other collective blocks its device.
// Mixed precision (bf16) halves activations and gradients, keeps bf16
// weights beside fp32 master weights, and times products at the bf16 peak.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autoshard/plan/cluster.h"
#include "autoshard/shard/conversion.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

struct PredictOptions {
  bool bf16 = false;
  double tokens = 0;       // per step, for tokens/s
  double model_flops = 0;  // per step (all devices), for FLOP/s per device
};

struct MemoryPrediction {
  double weights = 0, optimizer_state = 0, inputs = 0, activations = 0;
  double process = 0;  // the process itself (CPU clusters)
  double total() const { return weights + optimizer_state + inputs + activations + process; }
};

struct StepPrediction {
  double compute_s = 0;
  // Seconds of each collective kind on each mesh axis ("all_reduce", "model").
  std::map<std::pair<std::string, std::string>, double> collective_s;
  double communication_s = 0;
  double step_s = 0;
  // Communication the step hides behind compute (gradient buckets):
  // compute_s + communication_s - step_s.
  double hidden_communication_s = 0;
  MemoryPrediction memory;  // of the device priced (device 0: the largest blocks)
  double tokens_per_s = 0;
  double model_flops_per_device_per_s = 0;
  double process_bytes = 0;  // in-process devices together (set by callers that price them all)
};

// Where predict() places one op of the step, in seconds from its start:
// the device's own ops and blocking collectives on lane 0, gradient buckets
// (runtime/overlap.h) on lane 1. A bucket is placed as its first member.
// The latest end over the spans is the prediction's step_s.
struct PredictedSpan {
  int node;  // in the device's local program
  double begin_s, seconds;
  int lane = 0;
};

// Prices device `device`'s program of a partition (it must have been
// lowered); with `timeline`, also says where each op falls
// (plan/predicted_timeline.h draws it).
StepPrediction predict(const Partition& p, const Cluster& c, const PredictOptions& o,
                       int device = 0, std::vector<PredictedSpan>* timeline = nullptr);

// A floor under the memory predict() gives device 0's program of
// partition(g, mesh, request, {}, {0}) (MemoryPrediction::total() less the
// process), found without lowering that program: the leaves' blocks as
// predict counts them, and the most bytes of conversion results live at
// once. An op's input converted by a collective is a buffer of its own,
// made before the op and kept until the last op of the same part of the
// step that reads it in that layout (the partitioner converts once per
// part); buffers live at once take distinct buffers in the executor's plan.
// Copies it cannot see (views, results of rules, staging) only add to the
// real count. Ops without a decision in `request` and what they read are
// left out. The planner rejects a plan whose floor is over the budget
// without partitioning it (a fraction of the cost on 1,024 devices).
double memory_floor(const Graph& g, const DeviceMesh& mesh, const PartitionRequest& request,
                    bool bf16);

// The building blocks, shared with the planner.
double op_seconds(const Cluster& c, const Node& n, const std::vector<Shape>& inputs,
                  const Shape& output, int devices, bool bf16);
double collective_seconds(const Cluster& c, const DeviceMesh& mesh, int axis, bool all_reduce,
                          double bytes, double largest_block);
// A gradient bucket's all-reduce over `axis`: at its link's bucket_bandwidth
// where it has one (MPI's non-blocking reductions), else as above.
double bucket_seconds(const Cluster& c, const DeviceMesh& mesh, int axis, double bytes);
// The time of converting a value of global `shape` between two shardings
// (conversion_plan's steps); a slice is priced as the op the partitioner
// inserts for it (a local copy plus the op overhead).
double conversion_seconds(const Cluster& c, const DeviceMesh& mesh, const Sharding& from,
                          const Sharding& to, const Shape& shape, bool bf16);
// Writing a state back into its own layout after an update in another one
// (`from`: the update's layout, `to`: the state's): the conversion and the
// assign the partitioner inserts.
double write_back_seconds(const Cluster& c, const DeviceMesh& mesh, const Sharding& from,
                          const Sharding& to, const Shape& shape, bool bf16);

}  // namespace autoshard
