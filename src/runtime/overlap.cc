#include "autoshard/runtime/overlap.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "autoshard/comm/communicator.h"
#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {
OverlapOptions& process_options() {
  static OverlapOptions options;
  return options;
}
}  // namespace

const OverlapOptions& overlap_options() {
  return process_options();
}

void set_overlap_options(const OverlapOptions& options) {
  process_options() = options;
}

int64_t bucket_bytes_from_mb(double mb) {
  constexpr double kMaxMb = 1 << 20;  // a tebibyte: larger than any step's gradients
  AS_CHECK(std::isfinite(mb) && mb > 0 && mb <= kMaxMb, "--bucket-mb ", mb,
           " must be a positive number of megabytes up to ", kMaxMb,
           " (25 is DDP's default; --no-overlap reduces gradients unbucketed)");
  return std::max<int64_t>(4, std::llround(mb * (1 << 20)));
}

namespace {

// Members start on 64-byte boundaries and fill whole 64 bytes, as a tensor's
// own storage does: kernels read a member's result with aligned vector
// loads. (The gaps stay zero and are summed as zeros.)
constexpr int64_t kAlign = 16;

struct Candidate {
  int node, produced, read;  // the all-reduce, its input's position, its own position
};

// Per node: whether it helps make what the step leaves behind (what an
// optimizer update, an assign or a gradient accumulation writes, and the
// values nothing reads: its outputs, the loss), counted back from there up
// to the ops that make a weight's gradient out of activations (a product, a
// sum over the batch, a scatter of rows). The all-reduces marked are weight
// gradients', the gradient norm's and the loss's. An activation gradient's
// all-reduce (Megatron's of a LayerNorm's input gradient, [s, b, h]) lies
// behind such an op and stays unmarked: its result is read within its
// block's backward pass, so a bucket buffer held for the whole step would
// cost a whole activation for a reduction with little to hide behind.
std::vector<bool> made_for_the_step_end(const Graph& g, const std::vector<int>& schedule) {
  std::vector<bool> read(g.size(), false), marked(g.size(), false);
  for (int i : schedule)
    for (int in : g.node(i).inputs) read[in] = true;
  std::vector<int> stack;
  for (int i : schedule) {
    const Node& n = g.node(i);
    if (!n.is_leaf() && (op_def(n.op).side_effect || !read[i])) stack.push_back(i);
  }
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    if (marked[v]) continue;
    marked[v] = true;
    const Node& n = g.node(v);
    if (n.is_leaf() || op_def(n.op).makes_weight_gradient) continue;
    for (int in : n.inputs)
      if (!marked[in]) stack.push_back(in);
  }
  return marked;
}

// The all-reduces worth starting early, in the order their inputs are made.
std::vector<Candidate> candidates(const Graph& g, const std::vector<int>& schedule) {
  std::vector<int> pos(g.size(), -1), root(g.size());
  for (int k = 0; k < static_cast<int>(schedule.size()); ++k) pos[schedule[k]] = k;
  for (int i : schedule) {
    const Node& n = g.node(i);
    root[i] = !n.is_leaf() && op_def(n.op).aliases_input ? root[n.inputs[0]] : i;
  }
  // Per storage: the positions of the ops that write it in place.
  std::map<int, std::vector<int>> written;
  for (int k = 0; k < static_cast<int>(schedule.size()); ++k) {
    const Node& n = g.node(schedule[k]);
    if (n.is_leaf()) continue;
    for (size_t j = 0; j < n.inputs.size(); ++j)
      if (op_def(n.op).mutates_input(j)) written[root[n.inputs[j]]].push_back(k);
  }
  const std::vector<bool> weight_side = made_for_the_step_end(g, schedule);
  std::vector<Candidate> out;
  for (int k = 0; k < static_cast<int>(schedule.size()); ++k) {
    const Node& n = g.node(schedule[k]);
    if (op_def(n.op).collective != CommCost::Kind::AllReduce || !weight_side[schedule[k]]) continue;
    const int x = n.inputs[0];
    const Node& in = g.node(x);
    if (in.is_leaf() || in.dtype != DType::F32 || g.node(root[x]).is_leaf()) continue;
    const int p = pos[x];
    bool between = false;  // an op with work to hide the reduction behind
    for (int q = p + 1; q < k && !between; ++q) {
      const Node& m = g.node(schedule[q]);
      between = !m.is_leaf() && !op_def(m.op).is_view();
    }
    bool rewritten = false;
    if (auto it = written.find(root[x]); it != written.end())
      for (int q : it->second) rewritten |= q > pos[root[x]] && q < k;
    if (between && !rewritten) out.push_back({schedule[k], p, k});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Candidate& a, const Candidate& b) { return a.produced < b.produced; });
  return out;
}

}  // namespace

std::vector<GradientBucket> plan_gradient_buckets(const Graph& g, const std::vector<int>& schedule,
                                                  int64_t bucket_bytes) {
  AS_CHECK(bucket_bytes > 0, "gradient buckets must hold at least one byte, not ", bucket_bytes);
  std::vector<GradientBucket> done;
  std::map<std::pair<int, int>, GradientBucket> open;  // per (axis, op)
  for (const Candidate& c : candidates(g, schedule)) {
    const Node& n = g.node(c.node);
    const AllReduceAttrs& a = n.attr<AllReduceAttrs>();
    const auto key = std::make_pair(a.axis, static_cast<int>(a.op));
    const int64_t count = numel(n.shape);
    auto it = open.find(key);
    if (it != open.end() &&
        ((it->second.count + count) * 4 > bucket_bytes || c.produced >= it->second.wait_before)) {
      done.push_back(std::move(it->second));
      open.erase(it);
      it = open.end();
    }
    if (it == open.end()) {
      GradientBucket b;
      b.axis = a.axis;
      b.op = a.op;
      b.wait_before = c.read;
      it = open.emplace(key, std::move(b)).first;
    }
    GradientBucket& b = it->second;
    b.members.push_back(c.node);
    b.offsets.push_back(b.count);
    b.count += (count + kAlign - 1) / kAlign * kAlign;
    b.start_after = std::max(b.start_after, c.produced);
    b.wait_before = std::min(b.wait_before, c.read);
  }
  for (auto& [key, b] : open) done.push_back(std::move(b));
  // Start order: by the position after which each starts (every device
  // computes the same order).
  std::stable_sort(done.begin(), done.end(), [](const GradientBucket& x, const GradientBucket& y) {
    return x.start_after < y.start_after;
  });
  return done;
}

BucketRunner::BucketRunner(const Graph& g, const std::vector<int>& schedule, int64_t bucket_bytes)
    : buckets_(plan_gradient_buckets(g, schedule, bucket_bytes)), hooks_(g.size()) {
  for (int b = 0; b < static_cast<int>(buckets_.size()); ++b) {
    const GradientBucket& bucket = buckets_[b];
    // Started before the node after its last gradient's (never the end:
    // its first reader comes later).
    hooks_[schedule[bucket.start_after + 1]].start.push_back(b);
    hooks_[schedule[bucket.wait_before]].wait.push_back(b);
    inputs_.emplace_back();
    shapes_.emplace_back();
    for (int m : bucket.members) {
      hooks_[m].member = true;
      inputs_.back().push_back(g.node(m).inputs[0]);
      shapes_.back().push_back(g.node(m).shape);
    }
  }
  tickets_.assign(buckets_.size(), 0);
}

size_t BucketRunner::bytes() const {
  size_t total = 0;
  for (const GradientBucket& b : buckets_) total += static_cast<size_t>(b.count) * 4;
  return total;
}

bool BucketRunner::before(int node, std::vector<Tensor>& values, Communicator& comm,
                          const std::vector<CommGroup>& groups, std::vector<LaneSpan>* lane) {
  const Hook& h = hooks_[node];
  if (h.start.empty() && h.wait.empty()) {
    if (pending_ > 0) comm.progress_all_reduces();
    return h.member;
  }
  if (buffers_.empty())
    for (const GradientBucket& b : buckets_) buffers_.emplace_back(Shape{b.count});
  for (int b : h.start) {
    const GradientBucket& bucket = buckets_[b];
    float* buffer = buffers_[b].f32();
    for (size_t m = 0; m < bucket.members.size(); ++m) {
      const Tensor& grad = values[static_cast<size_t>(inputs_[b][m])];
      std::memcpy(buffer + bucket.offsets[m], grad.raw(), grad.nbytes());
    }
    const CommGroup* group = group_of_axis(groups, bucket.axis);
    AS_CHECK(group, "internal: no group for a gradient bucket's axis ", bucket.axis);
    tickets_[b] = comm.start_all_reduce(buffer, bucket.count, bucket.op, *group);
    ++pending_;
  }
  for (int b : h.wait) {
    comm.wait_all_reduce(tickets_[b]);
    if (lane) record_lane(b, comm.all_reduce_span(tickets_[b]), *lane);
    tickets_[b] = 0;
    --pending_;
    // The members' results are views of the reduced buffer.
    const GradientBucket& bucket = buckets_[b];
    const auto owner = std::make_shared<Tensor>(buffers_[b]);
    for (size_t m = 0; m < bucket.members.size(); ++m)
      values[static_cast<size_t>(bucket.members[m])] =
          Tensor::borrowed(shapes_[b][m], DType::F32, buffers_[b].f32() + bucket.offsets[m], owner);
  }
  return h.member;
}

// The lane runs its reductions in order: a span is drawn from the end of the
// one before it at the earliest (MPI's are seen complete only when tested).
void BucketRunner::record_lane(int b, std::pair<int64_t, int64_t> span,
                               std::vector<LaneSpan>& lane) const {
  if (span.second <= 0) return;  // not timed by this communicator
  const GradientBucket& bucket = buckets_[b];
  int64_t begin = span.first;
  if (!lane.empty()) begin = std::max(begin, lane.back().end_ns);
  lane.push_back({bucket.members.front(), static_cast<int>(bucket.members.size()),
                  bucket.count * int64_t{4}, begin, std::max(begin, span.second)});
}

void BucketRunner::finish(Communicator& comm, bool failed) noexcept {
  if (pending_ == 0) return;
  if (failed && !comm.abandon_all_reduces()) {
    // Reductions may still write into the buffers (MPI): they are kept
    // alive for the rest of the process, and this runner makes new ones.
    static auto* kept = new std::vector<Tensor>;
    static std::mutex mu;
    std::lock_guard<std::mutex> lock(mu);
    for (Tensor& b : buffers_) kept->push_back(std::move(b));
    buffers_.clear();
  }
  pending_ = 0;
  std::fill(tickets_.begin(), tickets_.end(), 0);
}

}  // namespace autoshard
