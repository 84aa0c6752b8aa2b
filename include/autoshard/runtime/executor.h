// Executor: runs a Graph on this process's CPU. Construction plans the work
// once: which nodes the requested outputs need (dead code is dropped), and
// which buffer each value lives in (buffers are reused once a value's last
// reader has run). The first run() allocates the buffers; every run calls the
// kernels in order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

class Communicator;
struct CommGroup;
class TimelineRecorder;
class BucketRunner;
struct OpSpan;
struct ProgramDescription;

// Seconds spent in each primitive, summed over runs (for benchmarks).
struct OpProfile {
  std::vector<double> seconds = std::vector<double>(static_cast<size_t>(Op::kCount), 0.0);
  std::vector<int64_t> calls = std::vector<int64_t>(static_cast<size_t>(Op::kCount), 0);
  std::string table() const;  // busiest ops first
};

struct StepContext {
  int64_t step = 1;  // 1-based optimizer step; also keys dropout masks
  double lr = 0;
  // The micro-batch of a step that accumulates gradients over several (a
  // pipeline's): on the first (0), accumulate ops start their sums afresh.
  int64_t microbatch = 0;
};

// Where each value of a Graph lives: the nodes to run (what the outputs and
// side effects need, in order) and the buffer of each value, reused once the
// value's last reader has run. Planned without allocating anything.
struct BufferPlan {
  std::vector<int> schedule;
  std::vector<int> slot_of;        // per node: its buffer, or -1 (leaves, views, fused)
  std::vector<size_t> slot_bytes;  // per buffer
  // Per node: the sum (a leaf) it adds itself into, fused with the
  // accumulate op that alone reads it (OpDef::accumulates), or -1. A
  // weight's gradient product so adds into its micro-batches' sum in place,
  // with no buffer or pass of its own, as Megatron-LM fuses it.
  std::vector<int> fused_sum;
  // Sums folded into their operands' storage: a two-operand sum
  // (OpDef::sums_inputs) whose later operand's producer can add into its
  // output (OpDef::accumulates), both operands read by the sum alone. The
  // later producer adds itself into the earlier operand's buffer
  // (`adds_into`, per node: that operand, or -1) and the sum is a view of
  // that buffer (`sum_view`, per node: the earlier operand, or -1): no pass
  // and no buffer of its own. A tied embedding's gradient (the LM head's
  // product plus the gather's scatter) and the gradient reaching one input
  // of several products (q, k and v) are such sums.
  std::vector<int> adds_into;
  std::vector<int> sum_view;
  // Per node: the value whose buffer holds it (itself, or for views and
  // folded sums the value they share storage with).
  std::vector<int> root;
  size_t total_bytes() const;
};
BufferPlan plan_buffers(const Graph& graph, const std::vector<int>& outputs);

class Executor {
 public:
  // `outputs` are the values the caller reads after run(); ops with side
  // effects (optimizer updates) always run.
  Executor(const Graph& graph, std::vector<int> outputs);
  ~Executor();

  // Binds a Parameter or Input node to caller-owned storage (shared, not
  // copied). Parameters are updated in place by optimizer ops.
  void bind(int node, const Tensor& value);
  void run(const StepContext& ctx = {});
  // The communicator and mesh-axis groups of this device (partitioned programs).
  void set_communicator(Communicator* comm, const std::vector<CommGroup>* groups) {
    comm_ = comm;
    groups_ = groups;
  }
  // Reduces the gradients of a partitioned program in buckets of at most
  // `bucket_bytes`, behind the backward pass (runtime/overlap.h; 0: each
  // all-reduce where it stands). Call before the first run: the buckets'
  // buffers count in planned_bytes().
  void set_overlap(int64_t bucket_bytes);
  // Times every kernel into `profile` on subsequent runs (null: stop).
  void set_profile(OpProfile* profile) { profile_ = profile; }
  // Records the next runs' ops into `timeline` as device `device`'s, with the
  // mesh's axis names (null: stop; runtime/timeline.h).
  void set_timeline(TimelineRecorder* timeline, int device = 0,
                    const std::vector<std::string>* axis_names = nullptr);
  const Tensor& value(int node) const { return values_[node]; }

  // Bytes of intermediate buffers after reuse (allocated on the first run).
  size_t planned_bytes() const { return planned_bytes_; }

 private:
  void allocate();

  const Graph& graph_;
  BufferPlan plan_;
  bool allocated_ = false;
  std::vector<int> schedule_;
  std::vector<Tensor> values_;
  std::vector<std::vector<Tensor*>> in_ptrs_;
  size_t planned_bytes_ = 0;
  OpProfile* profile_ = nullptr;
  TimelineRecorder* timeline_ = nullptr;
  int trace_device_ = 0;
  const std::vector<std::string>* axis_names_ = nullptr;
  std::shared_ptr<const ProgramDescription> described_;  // made on the first traced run
  std::vector<int> outputs_;
  Communicator* comm_ = nullptr;
  const std::vector<CommGroup>* groups_ = nullptr;
  std::unique_ptr<BucketRunner> buckets_;  // null: no gradient buckets
};

}  // namespace autoshard
