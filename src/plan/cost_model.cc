#include "autoshard/plan/cost_model.h"

#include <algorithm>
#include <functional>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/tensor/array_split.h"
#include "ir/op_def.h"

namespace autoshard {

double op_seconds(const Cluster& c, const Node& n, const std::vector<Shape>& inputs,
                  const Shape& output, int devices, bool bf16) {
  const OpDef& def = op_def(n.op);
  const OpCost cost = def.cost(n, CostShapes{inputs, output});
  if (cost.flops == 0 && cost.bytes == 0) return 0;
  const double bytes = bf16 && !cost.fp32_state ? cost.bytes / 2 : cost.bytes;
  double flops_time = 0;
  if (cost.flops > 0)
    flops_time =
        cost.gemm
            ? cost.flops / (c.device_flops(bf16, devices) * c.gemm_fraction(cost.flops, devices))
            : cost.flops / c.device_kernel_flops(devices);
  if (cost.gemm)
    flops_time += c.gemm_packing_seconds(cost.flops, cost.packed_bytes, devices) / (bf16 ? 2 : 1);
  const double memory_time = bytes / c.device_bandwidth(devices);
  return std::max(flops_time, memory_time) + c.op_overhead;
}

namespace {

// A ring collective of n members over link `l`.
double ring_seconds(const Cluster& c, const LinkLevel& l, double n, int devices, bool all_reduce,
                    double bytes, double largest_block) {
  const double w = l.bandwidth * l.efficiency;
  if (c.oversubscribed(devices) && c.oversubscribed_wait > 0) {
    // Devices that outnumber the cores meet in turn: a wait per call.
    const double move = all_reduce ? 2 * (n - 1) / n * bytes : (n - 1) * largest_block;
    return c.oversubscribed_wait + move / w;
  }
  if (all_reduce) return 2 * (n - 1) * l.latency + 2 * (n - 1) / n * bytes / w;
  return (n - 1) * (l.latency + largest_block / w);
}

}  // namespace

double collective_seconds(const Cluster& c, const DeviceMesh& mesh, int axis, bool all_reduce,
                          double bytes, double largest_block) {
  const double n = mesh.axis_size(axis);
  if (n <= 1) return 0;
  return ring_seconds(c, c.link(mesh, axis), n, mesh.size(), all_reduce, bytes, largest_block);
}

double bucket_seconds(const Cluster& c, const DeviceMesh& mesh, int axis, double bytes) {
  const double n = mesh.axis_size(axis);
  if (n <= 1) return 0;
  LinkLevel l = c.link(mesh, axis);
  if (l.bucket_bandwidth > 0) l.bandwidth = l.bucket_bandwidth, l.latency = l.bucket_latency;
  return ring_seconds(c, l, n, mesh.size(), true, bytes, bytes);
}

namespace {

// An op the partitioner inserts (a slice, an assign), priced as predict()
// prices it in the partitioned program: dispatch overhead included.
double inserted_op_seconds(const Cluster& c, Op op, const std::vector<Shape>& inputs,
                           const Shape& output, int devices, bool bf16) {
  Node n{};
  n.op = op;
  return op_seconds(c, n, inputs, output, devices, bf16);
}

}  // namespace

double conversion_seconds(const Cluster& c, const DeviceMesh& mesh, const Sharding& from,
                          const Sharding& to, const Shape& shape, bool bf16) {
  if (from == to) return 0;
  const double element = bf16 ? 2 : 4;
  double total = 0;
  for (const ConversionStep& s : conversion_plan(from, to, mesh)) {
    // The value's largest local block when the step starts.
    const Shape local = s.before.local_shape(shape, mesh, 0);
    const double bytes = double(numel(local)) * element;
    const int k = mesh.axis_size(s.axis);
    switch (s.kind) {
      case ConversionStep::Kind::AllReduce:
        total += collective_seconds(c, mesh, s.axis, true, bytes, bytes);
        break;
      case ConversionStep::Kind::ReduceScatter:
        total += collective_seconds(c, mesh, s.axis, false, bytes,
                                    bytes / double(std::max<int64_t>(1, local[s.dim])) *
                                        double(split_size(local[s.dim], k, 0)));
        break;
      case ConversionStep::Kind::AllGather:
        total += collective_seconds(c, mesh, s.axis, false, bytes * k, bytes);
        break;
      case ConversionStep::Kind::AllToAll:  // n - 1 pieces of the block, one per member
        total += collective_seconds(c, mesh, s.axis, false, bytes,
                                    bytes / double(std::max<int64_t>(1, local[s.to_dim])) *
                                        double(split_size(local[s.to_dim], k, 0)));
        break;
      case ConversionStep::Kind::Slice: {
        Shape block = local;
        block[s.dim] = split_size(local[s.dim], k, 0);
        total += inserted_op_seconds(c, Op::Slice, {local}, block, mesh.size(), bf16);
        break;
      }
    }
  }
  return total;
}

double write_back_seconds(const Cluster& c, const DeviceMesh& mesh, const Sharding& from,
                          const Sharding& to, const Shape& shape, bool bf16) {
  if (from == to) return 0;
  const Shape local = to.local_shape(shape, mesh, 0);
  return conversion_seconds(c, mesh, from, to, shape, bf16) +
         inserted_op_seconds(c, Op::Assign, {local, local}, local, mesh.size(), bf16);
}

double memory_floor(const Graph& g, const DeviceMesh& mesh, const PartitionRequest& request,
                    bool bf16) {
  const std::vector<bool> live = live_nodes(g, {});
  // Each value's layout where it is known: a leaf's (replicated unless
  // given), an op's with a decision; nullptr elsewhere.
  std::vector<const Sharding*> layout(size_t(g.size()), nullptr);
  std::vector<Sharding> leaf_layout(size_t(g.size()));
  double leaves = 0;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (!n.is_leaf()) continue;
    auto it = request.leaves.find(i);
    leaf_layout[size_t(i)] =
        it == request.leaves.end() ? Sharding::replicated(n.shape.size()) : it->second;
    layout[size_t(i)] = &leaf_layout[size_t(i)];
    if (!live[size_t(i)]) continue;
    // As predict counts them (4 bytes an element, the bf16 copy beside a
    // master weight).
    const double bytes = double(numel(leaf_layout[size_t(i)].local_shape(n.shape, mesh, 0))) * 4;
    leaves += n.is_input() || n.leaf().is_slot() || !bf16 ? bytes : bytes * 1.5;
  }
  // Buffers the program is sure to hold, each over the times it is sure to
  // be live. Op j's lowering is two times: 2j, when its conversions start
  // (what they read is live), and 2j + 1, when it runs (what it reads and
  // its result are live). Ops' results (not views, nor sums plan_buffers
  // may fold or fuse) from their op to their last reader; conversion
  // results by the partitioner's cache key (value, the reader's region and
  // block, layout), made for their first reader and reused by the others.
  struct Held {
    double bytes;
    int first, last;  // times; none when first > last
  };
  using Key = std::tuple<int, int, int, std::vector<int>, std::vector<int>, int>;
  std::map<Key, Held> converted;
  std::vector<Held> made(size_t(g.size()), Held{0, 1, 0});  // per op: its own result
  const auto extend = [](Held& h, int time) { h.last = std::max(h.last, time); };
  // Lowering::reshard: op i (by_op) or a conversion for it reads value `in`
  // (held in `from`) in layout `to`, converted through `via` if staged.
  const std::function<void(int, int, const Sharding&, const Sharding&, const Sharding*, bool)>
      reshard = [&](int i, int in, const Sharding& from, const Sharding& to, const Sharding* via,
                    bool by_op) {
        const int read = by_op ? 2 * i + 1 : 2 * i;
        if (from == to) return extend(made[size_t(in)], read);
        const Node& n = g.node(i);
        Key key{in,      n.region,   n.block,
                to.dims, to.partial, to.partial.empty() ? -1 : int(to.partial_op)};
        if (auto it = converted.find(key); it != converted.end()) return extend(it->second, read);
        const Sharding* source = &from;
        if (via && *via != from && *via != to) {
          reshard(i, in, from, *via, nullptr, false);
          source = via;
        } else {
          extend(made[size_t(in)], 2 * i);
        }
        // A slice's result may be a smaller copy: only a collective's counts.
        const std::vector<ConversionStep> steps = conversion_plan(*source, to, mesh);
        const Node& v = g.node(in);
        const double bytes =
            steps.empty() || steps.back().kind == ConversionStep::Kind::Slice
                ? 0
                : double(numel(to.local_shape(v.shape, mesh, 0))) * double(dtype_size(v.dtype));
        converted.emplace(std::move(key), Held{bytes, 2 * i + 1, read});
      };
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (!live[size_t(i)] || n.is_leaf()) continue;
    auto d = request.decisions.find(i);
    if (d == request.decisions.end()) continue;
    const ShardDecision& decision = d->second;
    const OpDef& def = op_def(n.op);
    // An op with a window (a convolution, a pool) may read a halo exchange's
    // result, smaller than its converted input, which the program can free
    // before the op runs: its reads end when its conversions do.
    const bool runs_on_its_inputs = def.window == nullptr;
    for (size_t k = 0; k < n.inputs.size() && k < decision.inputs.size(); ++k) {
      const Sharding* from = layout[size_t(n.inputs[k])];
      const bool staged = k < decision.via.size() && decision.via[k];
      if (from)
        reshard(i, n.inputs[k], *from, decision.inputs[k], staged ? &*decision.via[k] : nullptr,
                runs_on_its_inputs);
    }
    layout[size_t(i)] = &decision.output;
    if (def.aliases_input || def.accumulates || def.sums_inputs || def.adds_into_input) continue;
    made[size_t(i)] = {
        double(numel(decision.output.local_shape(n.shape, mesh, 0))) * double(dtype_size(n.dtype)),
        2 * i + 1, 2 * i + 1};
  }
  // The most bytes held at one time.
  std::vector<double> up(2 * size_t(g.size()), 0), down(2 * size_t(g.size()), 0);
  const auto hold = [&](const Held& h) {
    if (h.first > h.last) return;
    up[size_t(h.first)] += h.bytes;
    down[size_t(h.last)] += h.bytes;
  };
  for (const auto& [key, h] : converted) hold(h);
  for (const Held& h : made) hold(h);
  double now = 0, most = 0;
  for (size_t t = 0; t < up.size(); ++t) {
    now += up[t];
    most = std::max(most, now);
    now -= down[t];
  }
  return leaves + most * (bf16 ? 0.5 : 1.0);
}

StepPrediction predict(const Partition& p, const Cluster& c, const PredictOptions& o, int device,
                       std::vector<PredictedSpan>* timeline) {
  AS_CHECK(device >= 0 && device < int(p.local.size()) && !p.local_of[device].empty(),
           "predict: device ", device, " has no local program");
  c.check_mesh(p.mesh);
  const Graph& g = p.local[device];
  const int devices = p.mesh.size();
  StepPrediction out;
  const BufferPlan plan = plan_buffers(g, p.outputs[device]);
  std::vector<Shape> inputs;
  // Devices that outnumber the cores: each stretch of work between two
  // collectives is timed as a whole (the cores' turns over it), from what it
  // takes each device on a core of its own.
  const bool stretches = c.oversubscribed(devices) && c.oversubscribed_slice > 0;
  double stretch = 0;  // seconds of the current stretch on a core of one's own
  double clock = 0, lane = 0;
  size_t stretch_first = timeline ? timeline->size() : 0;  // the stretch's first span
  const auto end_stretch = [&] {
    const double t = c.stretch_seconds(stretch, devices);
    if (timeline && stretch > 0)  // the stretch's ops share its time in proportion
      for (size_t k = stretch_first; k < timeline->size(); ++k) {
        PredictedSpan& s = (*timeline)[k];
        s.begin_s = clock + (s.begin_s - clock) * t / stretch;
        s.seconds *= t / stretch;
      }
    out.compute_s += t;
    clock += t;
    stretch = 0;
    stretch_first = timeline ? timeline->size() : 0;
  };
  // Gradient buckets reduce on their own lane behind the ops after them
  // (runtime/overlap.h): `clock` runs through the device's ops and blocking
  // collectives, `lane` through its buckets; a bucket starts at
  // max(clock, lane) and the first read of its results waits for it.
  // (Not where devices outnumber the cores: there the lane has no core.)
  const OverlapOptions& overlap = overlap_options();
  const std::vector<GradientBucket> held =
      overlap.enabled ? plan_gradient_buckets(g, plan.schedule, overlap.bucket_bytes)
                      : std::vector<GradientBucket>{};
  const std::vector<GradientBucket> buckets = stretches ? std::vector<GradientBucket>{} : held;
  std::vector<std::vector<int>> starts(g.size()), waits(g.size());
  std::vector<bool> member(g.size(), false);
  for (size_t b = 0; b < buckets.size(); ++b) {
    starts[plan.schedule[buckets[b].start_after + 1]].push_back(int(b));
    waits[plan.schedule[buckets[b].wait_before]].push_back(int(b));
    for (int m : buckets[b].members) member[m] = true;
  }
  std::vector<double> done(buckets.size(), 0);
  // The buckets' buffers, which the executor holds whether or not the
  // buckets overlap (Executor::set_overlap counts them too).
  double bucket_bytes = 0;
  for (const GradientBucket& b : held) bucket_bytes += double(b.count) * 4;
  for (int i : plan.schedule) {
    const Node& n = g.node(i);
    for (int b : starts[i]) {
      const double t = bucket_seconds(c, p.mesh, buckets[b].axis,
                                      double(buckets[b].count) * 4 * (o.bf16 ? 0.5 : 1.0));
      out.collective_s[{"all_reduce", p.mesh.axis_name(buckets[b].axis)}] += t;
      out.communication_s += t;
      if (timeline) timeline->push_back({buckets[b].members.front(), std::max(clock, lane), t, 1});
      lane = done[b] = std::max(clock, lane) + t;
    }
    for (int b : waits[i]) clock = std::max(clock, done[b]);
    if (member[i] || plan.sum_view[i] >= 0) continue;  // a folded sum runs no kernel
    if (n.is_leaf()) {
      const double bytes = double(numel(n.shape)) * 4;
      if (n.is_input())
        out.memory.inputs += bytes;
      else if (n.leaf().is_slot())
        out.memory.optimizer_state += bytes;
      else
        out.memory.weights += o.bf16 ? bytes * 1.5 : bytes;  // bf16 copy beside the fp32 master
      continue;
    }
    inputs.clear();
    for (int in : n.inputs) inputs.push_back(g.node(in).shape);
    const OpDef& def = op_def(n.op);
    if (def.comm) {
      const CommCost cc = def.comm(n, CostShapes{inputs, n.shape});
      const double scale = o.bf16 ? 0.5 : 1.0;
      const double t = collective_seconds(c, p.mesh, cc.axis, cc.kind == CommCost::Kind::AllReduce,
                                          cc.bytes * scale, cc.largest_block * scale);
      out.collective_s[{def.name, p.mesh.axis_name(cc.axis)}] += t;
      out.communication_s += t;
      if (stretches) end_stretch();
      if (timeline) timeline->push_back({i, clock, t});
      clock += t;
      stretch_first = timeline ? timeline->size() : 0;
      continue;
    }
    if (stretches) {
      const double t = op_seconds(c, n, inputs, n.shape, c.shared_cores, o.bf16);
      if (timeline) timeline->push_back({i, clock + stretch, t});
      stretch += t;
    } else {
      const double t = op_seconds(c, n, inputs, n.shape, devices, o.bf16);
      if (timeline) timeline->push_back({i, clock, t});
      out.compute_s += t;
      clock += t;
    }
  }
  end_stretch();
  out.memory.activations = (double(plan.total_bytes()) + bucket_bytes) * (o.bf16 ? 0.5 : 1.0);
  out.memory.process = c.process_bytes;
  out.step_s = std::max(clock, lane);
  out.hidden_communication_s = out.compute_s + out.communication_s - out.step_s;
  if (out.step_s > 0) {
    out.tokens_per_s = o.tokens / out.step_s;
    out.model_flops_per_device_per_s = o.model_flops / out.step_s / devices;
  }
  return out;
}

}  // namespace autoshard
