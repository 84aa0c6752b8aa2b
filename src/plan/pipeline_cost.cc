#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/plan/pipeline.h"
#include "autoshard/runtime/executor.h"
#include "ir/op_def.h"

namespace autoshard {

PipelineSchedule parse_pipeline_schedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::GPipe;
  if (name == "1f1b") return PipelineSchedule::OneFOneB;
  if (name == "interleaved") return PipelineSchedule::Interleaved;
  fail("--schedule '", name, "' is none of gpipe, 1f1b, interleaved");
}

const char* pipeline_schedule_name(PipelineSchedule s) {
  switch (s) {
    case PipelineSchedule::GPipe:
      return "gpipe";
    case PipelineSchedule::OneFOneB:
      return "1f1b";
    case PipelineSchedule::Interleaved:
      return "interleaved";
  }
  return "?";
}

PartCost part_cost(const Partition& p, const Cluster& c, const DeviceMesh& full,
                   const std::string& batch_axis, bool bf16) {
  PartCost out;
  out.memory = predict(p, c, {bf16}).memory;
  const Graph& g = p.local[0];
  // Which ops belong to the optimizer: those reading optimizer state, or a
  // value computed from it (ids are in topological order).
  std::vector<char> update(size_t(g.size()), 0);
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.is_parameter()) update[size_t(i)] = n.leaf().is_slot();
    for (int in : n.inputs) update[size_t(i)] |= update[size_t(in)];
  }
  const double scale = bf16 ? 0.5 : 1.0;
  std::vector<Shape> inputs;
  const BufferPlan plan = plan_buffers(g, p.outputs[0]);
  for (int i : plan.schedule) {
    const Node& n = g.node(i);
    if (n.is_leaf() || plan.sum_view[i] >= 0) continue;  // a folded sum runs no kernel
    inputs.clear();
    for (int in : n.inputs) inputs.push_back(g.node(in).shape);
    const OpDef& def = op_def(n.op);
    if (def.comm) {
      const CommCost cc = def.comm(n, CostShapes{inputs, n.shape});
      // The stage's axis (or tuple of axes) among the full mesh's.
      std::vector<int> members;
      bool batch = false;  // the batch axis among the collective's
      for (int a : axis_members(cc.axis)) {
        members.push_back(full.axis_index(p.mesh.axis_names()[size_t(a)]));
        batch = batch || p.mesh.axis_names()[size_t(a)] == batch_axis;
      }
      std::sort(members.begin(), members.end());
      const double t =
          collective_seconds(c, full, tuple_axis(members), cc.kind == CommCost::Kind::AllReduce,
                             cc.bytes * scale, cc.largest_block * scale);
      // Over the batch axis (alone, or in a tuple: the gradient norm's sum
      // over every device) the gradient sync runs once a step; but a gather
      // there outside the update (a weight sharded over the data axis as
      // FSDP's are, gathered where it is used) or an all-to-all runs again
      // in every micro-batch.
      const bool gather =
          cc.kind == CommCost::Kind::AllGather || cc.kind == CommCost::Kind::AllToAll;
      (batch && (update[size_t(i)] || !gather) ? out.sync_s
       : update[size_t(i)]                     ? out.optimizer_s
                                               : out.microbatch_s) += t;
      continue;
    }
    const double t = op_seconds(c, n, inputs, n.shape, full.size(), bf16);
    (update[size_t(i)] ? out.optimizer_s : out.microbatch_s) += t;
  }
  return out;
}

namespace {

MemoryPrediction minus(const MemoryPrediction& a, const MemoryPrediction& b) {
  MemoryPrediction m;
  m.weights = a.weights - b.weights;
  m.optimizer_state = a.optimizer_state - b.optimizer_state;
  m.inputs = a.inputs - b.inputs;
  m.activations = a.activations - b.activations;
  m.process = a.process - b.process;
  return m;
}

PartCost minus(const PartCost& a, const PartCost& b) {
  // Clamped at zero: a trace's rounding (a buffer reused one way or the
  // other) must not make a part cost negative.
  auto pos = [](double x) { return std::max(0.0, x); };
  PartCost d;
  d.microbatch_s = pos(a.microbatch_s - b.microbatch_s);
  d.optimizer_s = pos(a.optimizer_s - b.optimizer_s);
  d.sync_s = pos(a.sync_s - b.sync_s);
  d.memory = minus(a.memory, b.memory);
  d.memory.weights = pos(d.memory.weights);
  d.memory.optimizer_state = pos(d.memory.optimizer_state);
  d.memory.inputs = pos(d.memory.inputs);
  d.memory.activations = pos(d.memory.activations);
  d.memory.process = pos(d.memory.process);
  return d;
}

}  // namespace

void split_parts(const PartCost& one, const PartCost& two, const PartCost& one_x2,
                 const PartCost& two_x2, PartCost& block, PartCost& base) {
  block = minus(two, one);
  block.memory.inputs = 0;  // the tokens are the base's
  block.memory.process = 0;
  // A block's buffers at b and 2b: a x b + g, its stash a x b.
  const double per_block = block.memory.activations;
  const double stash =
      std::max(0.0, (two_x2.memory.activations - one_x2.memory.activations) - per_block);
  block.memory.activations = std::min(stash, per_block);
  block.held_bytes = per_block - block.memory.activations;
  base = minus(one, block);
  base.memory.process = one.memory.process;
  base.memory.activations = 0;
  base.held_bytes = std::max(0.0, one.memory.activations - per_block);
}

void check_pipeline_shape(const PipelineShape& s, int layers) {
  AS_CHECK(s.stages >= 1, "--mesh: pipe must be at least 1");
  AS_CHECK(s.microbatches >= 1, "--microbatches must be at least 1");
  AS_CHECK(s.virtual_stages >= 1, "--virtual-stages must be at least 1");
  AS_CHECK(s.virtual_stages == 1 || s.schedule == PipelineSchedule::Interleaved,
           "--virtual-stages ", s.virtual_stages, " needs --schedule interleaved");
  AS_CHECK(int64_t(s.stages) * s.virtual_stages <= layers, "--mesh pipe=", s.stages,
           s.virtual_stages > 1 ? " with --virtual-stages " + std::to_string(s.virtual_stages) : "",
           " needs at least ", int64_t(s.stages) * s.virtual_stages, " blocks but the model has ",
           layers, "; use fewer stages");
  AS_CHECK(s.schedule != PipelineSchedule::Interleaved || s.microbatches % s.stages == 0,
           "--schedule interleaved needs --microbatches a multiple of pipe (", s.stages, "), not ",
           s.microbatches);
}

std::vector<int> balance_stages(int layers, int stages, double block_s, double first_extra_s,
                                double last_extra_s) {
  AS_CHECK(stages >= 1 && layers >= stages, "balance_stages: ", layers, " blocks over ", stages,
           " stages");
  auto extra = [&](int k) {
    return (k == 0 ? first_extra_s : 0) + (k == stages - 1 ? last_extra_s : 0);
  };
  // The blocks stage k can take within `limit` seconds.
  auto capacity = [&](int k, double limit) {
    if (block_s <= 0) return layers;
    return int(std::clamp(std::floor((limit - extra(k)) / block_s + 1e-9), 0.0, double(layers)));
  };
  // The smallest limit, among the stage times n x block + extra, at which
  // every stage takes at least one block and all take every block.
  std::vector<double> limits;
  for (int k = 0; k < stages; ++k)
    for (int n = 1; n <= layers; ++n) limits.push_back(n * block_s + extra(k));
  std::sort(limits.begin(), limits.end());
  for (double limit : limits) {
    int total = 0;
    bool each = true;
    for (int k = 0; k < stages; ++k) {
      const int cap = capacity(k, limit);
      each = each && cap >= 1;
      total += cap;
    }
    if (!each || total < layers) continue;
    // As even as the limit allows: the even split (the earlier stages take
    // the remainder), cut to each stage's capacity, the blocks cut given to
    // the stages with room that hold fewest (the earliest first).
    std::vector<int> n(static_cast<size_t>(stages));
    int left = layers;
    for (int k = 0; k < stages; ++k) {
      n[size_t(k)] = std::min(layers / stages + (k < layers % stages), capacity(k, limit));
      left -= n[size_t(k)];
    }
    while (left > 0) {
      int pick = -1;
      for (int k = 0; k < stages; ++k)
        if (n[size_t(k)] < capacity(k, limit) && (pick < 0 || n[size_t(k)] < n[size_t(pick)]))
          pick = k;
      ++n[size_t(pick)];
      --left;
    }
    return n;
  }
  fail("balance_stages: no split of ", layers, " blocks over ", stages, " stages");
}

double bubble_fraction(const PipelineShape& s) {
  return double(s.stages - 1) / (double(s.virtual_stages) * double(s.microbatches));
}

double in_flight(const PipelineShape& s, int stage) {
  const double m = double(s.microbatches), p = double(s.stages), v = double(s.virtual_stages);
  switch (s.schedule) {
    case PipelineSchedule::GPipe:
      return m;
    case PipelineSchedule::OneFOneB:
      return std::min(m, p - stage);
    case PipelineSchedule::Interleaved:
      if (s.virtual_stages == 1) return std::min(m, p - stage);
      return std::min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1) / v;
  }
  return m;
}

int sends_per_microbatch(const PipelineShape& s, int stage) {
  if (s.stages == 1) return 0;
  return 2 * s.virtual_stages - (stage == 0) - (stage == s.stages - 1);
}

const StagePrediction& PipelinePrediction::largest_memory() const {
  return *std::max_element(stages.begin(), stages.end(), [](const auto& a, const auto& b) {
    return a.memory.total() < b.memory.total();
  });
}

PipelinePrediction predict_pipeline(const PartCost& block, const PartCost& base, int layers,
                                    const PipelineShape& shape, double p2p_bytes, double p2p_s,
                                    double tokens, double model_flops, int devices) {
  check_pipeline_shape(shape, layers);
  const int stages = shape.stages;
  // The head and loss dominate the base's time (the embedding's gather and
  // its gradient's scatter are small): the base's time goes to the last stage.
  const std::vector<int> counts =
      balance_stages(layers, stages, block.microbatch_s, 0, base.microbatch_s);
  PipelinePrediction out;
  out.p2p_bytes = p2p_bytes;
  out.bubble_fraction = bubble_fraction(shape);
  double slowest = 0;
  int first = 0;
  for (int k = 0; k < stages; ++k) {
    StagePrediction s;
    s.first_layer = first;
    s.layers = counts[size_t(k)];
    first += s.layers;
    const double n = s.layers;
    const bool ends = k == 0 || k == stages - 1;  // holds the base's weights
    s.microbatch_s = n * block.microbatch_s + (k == stages - 1 ? base.microbatch_s : 0);
    s.p2p_s = sends_per_microbatch(shape, k) * p2p_s;
    s.optimizer_s = n * block.optimizer_s + (ends ? base.optimizer_s : 0);
    s.sync_s = n * block.sync_s + (ends ? base.sync_s : 0);
    s.in_flight = in_flight(shape, k);
    s.memory.weights = n * block.memory.weights + (ends ? base.memory.weights : 0);
    s.memory.optimizer_state =
        n * block.memory.optimizer_state + (ends ? base.memory.optimizer_state : 0);
    s.memory.inputs = base.memory.inputs;
    s.memory.activations =
        s.in_flight * n * block.memory.activations + n * block.held_bytes + base.held_bytes;
    s.memory.process = base.memory.process;
    slowest = std::max(slowest, s.microbatch_s + s.p2p_s);
    out.optimizer_s = std::max(out.optimizer_s, s.optimizer_s);
    out.sync_s = std::max(out.sync_s, s.sync_s);
    out.stages.push_back(s);
  }
  const double m = double(shape.microbatches);
  out.pipeline_s = slowest * m * (1 + out.bubble_fraction);
  out.step_s = out.pipeline_s + out.optimizer_s + out.sync_s;
  if (out.step_s > 0) {
    out.tokens_per_s = tokens / out.step_s;
    out.model_flops_per_device_per_s = model_flops / out.step_s / devices;
  }
  return out;
}

double p2p_seconds(const Cluster& c, const DeviceMesh& mesh, int axis, double bytes) {
  if (mesh.axis_size(axis) <= 1) return 0;
  const LinkLevel& l = c.link(mesh, axis);
  return l.latency + bytes / (l.bandwidth * l.efficiency);
}

}  // namespace autoshard
