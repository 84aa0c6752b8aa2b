#include "autoshard/runtime/executor.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <exception>
#include <map>

#include "autoshard/error.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/runtime/timeline.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

// How many readers each live value has (an output counts as one).
std::vector<int> reader_counts(const Graph& graph, const std::vector<bool>& live,
                               const std::vector<int>& outputs) {
  std::vector<int> readers(graph.size(), 0);
  for (int i = 0; i < graph.size(); ++i)
    if (live[i])
      for (int in : graph.node(i).inputs) ++readers[in];
  for (int o : outputs) ++readers[o];
  return readers;
}

// Per node, the sum it runs fused into (BufferPlan::fused_sum): an
// accumulate op's value made by an op whose kernel can add into its output,
// read by nothing else and not an output, where the sum is a leaf that
// nothing else reads (so no reader sees it half-updated).
std::vector<int> fused_sums(const Graph& graph, const std::vector<bool>& live,
                            const std::vector<int>& readers) {
  std::vector<int> fused(graph.size(), -1);
  for (int i = 0; i < graph.size(); ++i) {
    const Node& acc = graph.node(i);
    if (!live[i] || !op_def(acc.op).adds_into_input) continue;
    const int sum = acc.inputs[0], value = acc.inputs[1];
    if (sum != value && graph.node(sum).is_leaf() && readers[sum] == 1 && readers[value] == 1 &&
        op_def(graph.node(value).op).accumulates)
      fused[value] = sum;
  }
  return fused;
}

// Roots of storage, and the sums folded into their operands (BufferPlan):
// one pass in schedule order, so an operand's own folding is settled before
// a sum over it is considered (a chain q + k + v folds into q's buffer).
void fold_sums(const Graph& graph, const std::vector<int>& readers, BufferPlan& plan) {
  const int n = graph.size();
  plan.root.resize(n);
  for (int i = 0; i < n; ++i) plan.root[i] = i;
  plan.adds_into.assign(n, -1);
  plan.sum_view.assign(n, -1);
  // Whether v's buffer is its own to add into: made by a kernel (not a
  // leaf, view, collective or fused producer) or a folded sum, and read
  // only by the sum.
  const auto owns_buffer = [&](int v) {
    const Node& node = graph.node(v);
    if (node.is_leaf() || readers[v] != 1 || node.dtype != DType::F32) return false;
    if (plan.sum_view[v] >= 0) return true;
    const OpDef& def = op_def(node.op);
    return plan.root[v] == v && plan.fused_sum[v] < 0 && plan.adds_into[v] < 0 && !def.local_only &&
           !def.aliases_input && !def.side_effect;
  };
  for (int i : plan.schedule) {
    const Node& node = graph.node(i);
    const OpDef& def = op_def(node.op);
    if (def.aliases_input) {
      plan.root[i] = plan.root[node.inputs[0]];
      continue;
    }
    if (!def.sums_inputs || node.inputs.size() != 2) continue;
    const int earlier = std::min(node.inputs[0], node.inputs[1]);
    const int later = std::max(node.inputs[0], node.inputs[1]);
    if (earlier == later || graph.node(earlier).shape != node.shape ||
        graph.node(later).shape != node.shape || !owns_buffer(earlier) || !owns_buffer(later) ||
        !op_def(graph.node(later).op).accumulates || plan.sum_view[later] >= 0)
      continue;
    plan.adds_into[later] = earlier;
    plan.sum_view[i] = earlier;
    plan.root[later] = plan.root[i] = plan.root[earlier];
  }
}

}  // namespace

BufferPlan plan_buffers(const Graph& graph, const std::vector<int>& outputs) {
  const int n = graph.size();
  BufferPlan plan;
  const std::vector<bool> live = live_nodes(graph, outputs);
  for (int i = 0; i < n; ++i)
    if (live[i]) plan.schedule.push_back(i);
  const std::vector<int> readers = reader_counts(graph, live, outputs);
  plan.fused_sum = fused_sums(graph, live, readers);
  fold_sums(graph, readers, plan);

  // Liveness: a buffer is free once the last reader of every value that
  // shares it (views, folded sums) has run. Outputs live forever.
  const std::vector<int>& root = plan.root;
  std::vector<int> last(n, -1);
  for (int i : plan.schedule) {
    const Node& node = graph.node(i);
    last[root[i]] = std::max(last[root[i]], i);
    for (int in : node.inputs) last[root[in]] = std::max(last[root[in]], i);
  }
  for (int o : outputs) last[root[o]] = INT_MAX;

  // Values into buffers, largest first: each takes the first buffer that
  // holds no value live at the same time (a buffer is as large as its first,
  // largest value), else a new one. Placing by size keeps small values from
  // splintering the large buffers (TFLite's greedy-by-size).
  struct Lifetime {
    size_t bytes;
    int first, last;  // from its node to its last reader, inclusive
    int id;
  };
  std::vector<Lifetime> values;
  for (int i : plan.schedule) {
    const Node& node = graph.node(i);
    if (node.is_leaf() || root[i] != i || plan.fused_sum[i] >= 0) continue;
    const size_t bytes = std::max<size_t>(4, numel(node.shape) * dtype_size(node.dtype));
    values.push_back({(bytes + 3) / 4 * 4, i, std::max(last[i], i), i});
  }
  std::stable_sort(values.begin(), values.end(),
                   [](const Lifetime& a, const Lifetime& b) { return a.bytes > b.bytes; });
  std::vector<std::map<int, int>> busy;  // per buffer: first -> last of its values
  plan.slot_of.assign(n, -1);
  for (const Lifetime& v : values) {
    size_t slot = 0;
    for (; slot < busy.size(); ++slot) {
      auto after = busy[slot].upper_bound(v.last);  // the first value starting after v
      if (after == busy[slot].begin() || std::prev(after)->second < v.first) break;
    }
    if (slot == busy.size()) {
      busy.emplace_back();
      plan.slot_bytes.push_back(v.bytes);
    }
    busy[slot][v.first] = v.last;
    plan.slot_of[v.id] = static_cast<int>(slot);
  }
  return plan;
}

size_t BufferPlan::total_bytes() const {
  size_t total = 0;
  for (size_t b : slot_bytes) total += b;
  return total;
}

Executor::Executor(const Graph& graph, std::vector<int> outputs)
    : graph_(graph), outputs_(std::move(outputs)) {
  plan_ = plan_buffers(graph, outputs_);
  schedule_ = plan_.schedule;
  planned_bytes_ = plan_.total_bytes();
  values_.resize(graph.size());
  in_ptrs_.resize(graph.size());
  for (int i : schedule_)
    for (int in : graph.node(i).inputs) in_ptrs_[i].push_back(&values_[in]);
}

Executor::~Executor() = default;

void Executor::set_overlap(int64_t bucket_bytes) {
  AS_CHECK(!allocated_, "internal: set_overlap after the first run");
  if (buckets_) planned_bytes_ -= buckets_->bytes();
  buckets_.reset();
  if (bucket_bytes <= 0) return;
  buckets_ = std::make_unique<BucketRunner>(graph_, schedule_, bucket_bytes);
  if (buckets_->empty()) buckets_.reset();
  if (buckets_) planned_bytes_ += buckets_->bytes();
}

namespace {
// Ends a run's gradient buckets: after an error, stops the reductions still
// running before their buffers can be reused.
struct FinishBuckets {
  BucketRunner* runner;
  Communicator* comm;
  int uncaught = std::uncaught_exceptions();
  ~FinishBuckets() {
    if (runner) runner->finish(*comm, std::uncaught_exceptions() > uncaught);
  }
};
}  // namespace

// Buffers are made on the first run, so that a caller can first check that
// planned_bytes() fits.
void Executor::allocate() {
  std::vector<Tensor> slots;
  for (size_t b : plan_.slot_bytes) slots.emplace_back(Shape{static_cast<int64_t>(b / 4)});
  for (int i : schedule_)
    if (plan_.slot_of[i] >= 0)
      values_[i] = slots[plan_.slot_of[i]].view(graph_.node(i).shape, graph_.node(i).dtype);
  allocated_ = true;
}

void Executor::bind(int node, const Tensor& value) {
  const Node& n = graph_.node(node);
  AS_CHECK(n.is_leaf(), "bind: node ", node, " is not a parameter or input");
  AS_CHECK(value.shape() == n.shape && value.dtype() == n.dtype, "bind: '", n.leaf().key(),
           "' expects ", dtype_name(n.dtype), shape_str(n.shape), ", got ",
           dtype_name(value.dtype()), shape_str(value.shape()));
  values_[node] = value;
}

void Executor::set_timeline(TimelineRecorder* timeline, int device,
                            const std::vector<std::string>* axis_names) {
  timeline_ = timeline;
  trace_device_ = device;
  axis_names_ = axis_names;
}

void Executor::run(const StepContext& step) {
  if (!allocated_) allocate();
  KernelContext ctx{step.step, step.lr, comm_, groups_, step.microbatch};
  KernelContext accumulating = ctx;
  accumulating.accumulate = true;
  std::vector<OpSpan> spans;
  std::vector<LaneSpan> lane;  // the buckets' reductions, when tracing
  if (timeline_) {
    if (!described_)
      described_ = std::make_shared<const ProgramDescription>(describe_program(
          graph_, outputs_, axis_names_ ? *axis_names_ : std::vector<std::string>{}));
    spans.reserve(schedule_.size());
  }
  AS_CHECK(!buckets_ || comm_, "internal: gradient buckets without a communicator");
  FinishBuckets finish_buckets{buckets_.get(), comm_};
  for (int i : schedule_) {
    const Node& node = graph_.node(i);
    if (buckets_ && buckets_->before(i, values_, *comm_, *groups_, timeline_ ? &lane : nullptr))
      continue;
    if (node.is_leaf()) {
      AS_CHECK(values_[i].numel() == numel(node.shape) && values_[i].raw() != nullptr,
               "run: ", op_name(node.op), " '", node.leaf().key(), "' has no value bound");
      continue;
    }
    const OpDef& def = op_def(node.op);
    if (def.aliases_input) {
      values_[i] = values_[node.inputs[0]].reshaped(node.shape);
      if (!(def.mutates & 1)) continue;  // a view; an update in place runs below
    }
    if (const int operand = plan_.sum_view[i]; operand >= 0) {
      values_[i] = values_[operand];  // a folded sum: its later operand added itself in
      continue;
    }
    // A product fused into its sum writes there: the first micro-batch
    // starts the sum, later ones add to it. One folded into a sum adds
    // itself to the sum's earlier operand.
    const int sum = plan_.fused_sum[i], into = plan_.adds_into[i];
    if (sum >= 0) values_[i] = values_[sum];
    if (into >= 0) values_[i] = values_[into];
    const KernelContext& run_ctx =
        (sum >= 0 && step.microbatch > 0) || into >= 0 ? accumulating : ctx;
    if (!profile_ && !timeline_) {
      def.kernel(node, in_ptrs_[i], values_[i], run_ctx);
      continue;
    }
    const int64_t t0 = TimelineRecorder::now_ns();
    def.kernel(node, in_ptrs_[i], values_[i], run_ctx);
    const int64_t t1 = TimelineRecorder::now_ns();
    if (timeline_) spans.push_back({i, t0, t1});
    if (profile_) {
      profile_->seconds[size_t(node.op)] += double(t1 - t0) / 1e9;
      profile_->calls[size_t(node.op)] += 1;
    }
  }
  if (timeline_) {
    timeline_->add_ops(trace_device_, described_, std::move(spans));
    timeline_->add_lane(trace_device_, std::move(lane));
  }
}

std::string OpProfile::table() const {
  std::vector<size_t> order;
  double total = 0;
  for (size_t i = 0; i < seconds.size(); ++i)
    if (calls[i]) order.push_back(i), total += seconds[i];
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return seconds[a] > seconds[b]; });
  std::string out;
  char line[160];
  for (size_t i : order) {
    std::snprintf(line, sizeof line, "  %-20s %9.1f ms %6.1f%% %8lld calls\n", op_name(Op(i)),
                  seconds[i] * 1e3, 100.0 * seconds[i] / total, static_cast<long long>(calls[i]));
    out += line;
  }
  return out;
}

}  // namespace autoshard
