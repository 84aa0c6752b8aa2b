// Communication behind computation: a partitioned step's all-reduces of
// gradients (over the data axis) are grouped into buckets, each started on
// the communication lane (Communicator::start_all_reduce) as soon as the
// backward pass has produced its last gradient, and waited for where the
// program first reads one of its results (the optimizer update, or the
// gradient norm when clipping). PyTorch DDP's scheme, planned from the
// executor's own program order: no new ops, the same buffers.
//
// The numbers do not change: a bucket holds exact copies of its gradients,
// and an all-reduce sums each element over the members in an order that
// depends neither on the buffer's length nor on where the element sits in
// it (in-process: member order; MPI with two members: a + b = b + a).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/tensor/reduce_op.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct OverlapOptions {
  bool enabled = true;
  int64_t bucket_bytes = 25 << 20;  // DDP's bucket_cap_mb = 25
};

// The process's setting (train --bucket-mb, --no-overlap), read by every
// partitioned step built after it is set and by the cost model.
const OverlapOptions& overlap_options();
void set_overlap_options(const OverlapOptions& options);
// `--bucket-mb` (megabytes, MiB like DDP's) as bytes; bad values are one
// error naming the flag.
int64_t bucket_bytes_from_mb(double mb);

// One bucket: all-reduces over one mesh axis with one reduction, its
// members' inputs copied back to back into one buffer.
struct GradientBucket {
  int axis = -1;
  ReduceOp op = ReduceOp::Sum;
  std::vector<int> members;      // AllReduce nodes, in start order
  std::vector<int64_t> offsets;  // per member: its first element in the buffer
  int64_t count = 0;             // elements in all
  int start_after = -1;          // schedule position after which it starts
  int wait_before = -1;          // schedule position before which it is waited for
};

// The buckets of a local program run in `schedule` order. An all-reduce joins
// one when it sums, its input is a float value computed by an op (not a leaf,
// not written in place later), at least one op runs between that op and the
// all-reduce (something to hide it behind), and it reduces a weight's gradient:
// what an optimizer update, assign or gradient accumulation reads (or the step
// returns, as its loss), after the op that made the gradient out of
// activations. An activation gradient's all-reduce (Megatron's of a LayerNorm's
// input gradient) runs where it is, blocking, in a buffer of the buffer plan:
// in a bucket its [s, b, h] would be held for the whole step. Members are taken
// in the order their inputs are produced; a bucket closes before it would pass
// `bucket_bytes` (a larger gradient is a bucket of its own) or start after its
// first result is read. Every device of a group plans the same buckets: its
// program and its gradients' shapes are those of the other members.
std::vector<GradientBucket> plan_gradient_buckets(const Graph& local,
                                                  const std::vector<int>& schedule,
                                                  int64_t bucket_bytes);

class Communicator;
struct CommGroup;

// One bucket's reduction as the communication lane ran it (steady_clock
// nanoseconds), for timelines.
struct LaneSpan {
  int first_member;  // the bucket's first all-reduce node
  int members;
  int64_t bytes;
  int64_t begin_ns, end_ns;
};

// The executor's side of the buckets: their buffers, and what to do before
// each node of a run.
class BucketRunner {
 public:
  BucketRunner(const Graph& local, const std::vector<int>& schedule, int64_t bucket_bytes);
  bool empty() const { return buckets_.empty(); }
  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  // Bytes of the bucket buffers (allocated on the first run).
  size_t bytes() const;

  // Before node `node` runs: starts the buckets whose last gradient is now
  // computed (copying the gradients in), lets started ones progress, and
  // waits for those whose results `node` is the first to read. True when
  // `node` is a member all-reduce: its result is already in place (the
  // executor's value of it is a view of the bucket's buffer), skip it.
  // With `lane`, each bucket waited for is recorded there as the
  // communication lane ran it (for timelines, runtime/timeline.h).
  bool before(int node, std::vector<Tensor>& values, Communicator& comm,
              const std::vector<CommGroup>& groups, std::vector<LaneSpan>* lane = nullptr);
  // At the end of a run: on an error, stops what is still running before
  // the buffers can be reused; otherwise there is nothing left to wait for.
  void finish(Communicator& comm, bool failed) noexcept;

 private:
  struct Hook {
    std::vector<int> start, wait;  // buckets
    bool member = false;
  };
  void record_lane(int b, std::pair<int64_t, int64_t> span, std::vector<LaneSpan>& lane) const;
  std::vector<GradientBucket> buckets_;
  std::vector<Hook> hooks_;                 // per node
  std::vector<std::vector<int>> inputs_;    // per bucket, per member: the gradient it reads
  std::vector<std::vector<Shape>> shapes_;  // per bucket, per member: its shape
  std::vector<Tensor> buffers_;
  std::vector<int64_t> tickets_;  // per bucket, of this run (0: not started)
  int64_t pending_ = 0;           // buckets started and not yet waited for
};

}  // namespace autoshard
