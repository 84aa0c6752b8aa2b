#include "ir/loop_nest.h"

#include <algorithm>

#include "ir/op_def.h"

namespace autoshard {

ShardDecision decide(const LoopNest& nest, const LoopSplit& split) {
  auto dims_of = [&](const std::vector<int>& loops) {
    std::vector<int> dims;
    for (int l : loops) dims.push_back(l >= 0 ? split[l] : -1);
    return dims;
  };
  ShardDecision d;
  for (const std::vector<int>& in : nest.inputs) d.inputs.push_back(Sharding{dims_of(in), {}});
  d.output = Sharding{dims_of(nest.output), {}};
  for (size_t l = 0; l < nest.loops.size(); ++l)
    if (split[l] >= 0 && nest.loops[l].kind == Loop::Kind::Reduction) {
      add_partial(d.output.partial, split[l]);
      d.output.partial_op = nest.loops[l].reduce;
    }
  return d;
}

bool LoopNest::windowed(int loop) const {
  for (const Halo& h : halos)
    if (inputs[h.input][h.dim] == loop) return true;
  return false;
}

ShardDecision follow_inputs(const LoopNest& nest, const std::vector<Sharding>& inputs) {
  LoopSplit split(nest.loops.size(), -1);
  std::vector<int> used;
  for (size_t i = 0; i < inputs.size() && i < nest.inputs.size(); ++i)
    for (size_t d = 0; d < nest.inputs[i].size() && d < inputs[i].dims.size(); ++d) {
      const int loop = nest.inputs[i][d], axis = inputs[i].dims[d];
      if (loop < 0 || axis < 0 || split[loop] >= 0 || !nest.splittable(loop) ||
          overlaps_any(used, axis) || (is_tuple_axis(axis) && nest.windowed(loop)))
        continue;
      split[loop] = axis;
      used.push_back(axis);
    }
  return decide(nest, split);
}

namespace {
// Split reductions of different kinds (a sum and a max) cannot share one
// partial value: a strategy splits reductions of one kind only.
bool consistent(const LoopNest& nest, const LoopSplit& split) {
  int kinds = 0;
  for (size_t l = 0; l < nest.loops.size(); ++l)
    if (split[l] >= 0 && nest.loops[l].kind == Loop::Kind::Reduction)
      kinds |= nest.loops[l].reduce == ReduceOp::Sum ? 1 : 2;
  return kinds != 3;
}
}  // namespace

std::vector<int> split_axes(const DeviceMesh& mesh) {
  std::vector<int> real;
  for (int a = 0; a < mesh.rank(); ++a)
    if (mesh.axis_size(a) > 1) real.push_back(a);
  std::vector<int> out = real;
  // Every device at once: the tuple of all axes (each op's strategies grow
  // by about its loop count; every pair and triple as well would make a
  // three-axis problem several times larger to pose and solve).
  if (real.size() >= 2 && real.back() < kMaxTupleAxes) out.push_back(tuple_axis(real));
  return out;
}

std::vector<LoopSplit> enumerate_splits(const LoopNest& nest, const DeviceMesh& mesh,
                                        const std::vector<bool>* tuple_loops) {
  std::vector<LoopSplit> out{LoopSplit(nest.loops.size(), -1)};
  for (int axis : split_axes(mesh)) {
    const size_t before = out.size();
    for (size_t s = 0; s < before; ++s)
      for (size_t l = 0; l < nest.loops.size(); ++l) {
        if (!nest.splittable(static_cast<int>(l)) || out[s][l] >= 0 || overlaps_any(out[s], axis) ||
            (is_tuple_axis(axis) && (nest.windowed(int(l)) || (tuple_loops && !(*tuple_loops)[l]))))
          continue;
        LoopSplit next = out[s];
        next[l] = axis;
        if (consistent(nest, next)) out.push_back(std::move(next));
      }
  }
  return out;
}

std::vector<std::vector<int>> partial_carriers(Linearity linearity, int inputs) {
  std::vector<int> all(inputs);
  for (int k = 0; k < inputs; ++k) all[k] = k;
  switch (linearity) {
    case Linearity::None:
      return {};
    case Linearity::Sum:
    case Linearity::Unary:
      return {all};
    case Linearity::Product: {
      std::vector<std::vector<int>> each;
      for (int k : all) each.push_back({k});
      return each;
    }
    case Linearity::Numerator:
      return {{0}};
    case Linearity::Second:
      return {{1}};
  }
  return {};
}

bool takes_partial(Linearity linearity, const std::vector<Sharding>& inputs,
                   const Sharding& output) {
  std::vector<int> carriers;
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Sharding& in = inputs[k];
    if (in.partial.empty()) continue;
    const bool same_axes = carriers.empty() || in.partial == inputs[carriers[0]].partial;
    if (!same_axes || in.partial_op != ReduceOp::Sum || output.partial_op != ReduceOp::Sum ||
        !std::includes(output.partial.begin(), output.partial.end(), in.partial.begin(),
                       in.partial.end()))
      return false;
    carriers.push_back(int(k));
  }
  if (carriers.empty()) return true;
  for (const std::vector<int>& allowed : partial_carriers(linearity, int(inputs.size())))
    if (allowed == carriers) return true;
  return false;
}

std::vector<ShardDecision> enumerate_strategies(const LoopNest& nest, const DeviceMesh& mesh,
                                                Linearity linearity,
                                                const std::vector<bool>* tuple_loops) {
  std::vector<ShardDecision> out;
  const auto carriers = partial_carriers(linearity, int(nest.inputs.size()));
  for (const LoopSplit& split : enumerate_splits(nest, mesh, tuple_loops)) {
    out.push_back(decide(nest, split));
    const ShardDecision base = out.back();
    // Sums of partial sums stay sums: a split sum loop may add its own axes.
    if (!base.output.partial.empty() && base.output.partial_op != ReduceOp::Sum) continue;
    for (int axis = 0; axis < mesh.rank(); ++axis) {
      if (mesh.axis_size(axis) == 1 || overlaps_any(split, axis)) continue;
      for (const std::vector<int>& inputs : carriers) {
        ShardDecision d = base;
        for (int k : inputs) d.inputs[k].partial = {axis};
        d.output.partial.push_back(axis);
        std::sort(d.output.partial.begin(), d.output.partial.end());
        d.output.partial_op = ReduceOp::Sum;
        out.push_back(std::move(d));
      }
    }
  }
  return out;
}

std::vector<bool> tied_loops(const Graph& g, int id, const LoopNest& nest,
                             const std::vector<std::vector<bool>>& tied) {
  const Node& n = g.node(id);
  std::vector<bool> loops(nest.loops.size(), false);
  for (size_t k = 0; k < n.inputs.size() && k < nest.inputs.size(); ++k)
    for (size_t d = 0; d < nest.inputs[k].size(); ++d)
      if (nest.inputs[k][d] >= 0 && tied[size_t(n.inputs[k])][d])
        loops[size_t(nest.inputs[k][d])] = true;
  return loops;
}

std::vector<std::vector<bool>> dims_tied_to_inputs(const Graph& g, int dim) {
  std::vector<std::vector<bool>> tied(size_t(g.size()));
  for (int i = 0; i < g.size(); ++i) tied[size_t(i)].assign(g.node(i).shape.size(), false);
  for (int i : g.inputs())
    if (int(tied[size_t(i)].size()) > dim) tied[size_t(i)][size_t(dim)] = true;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.is_leaf() || !op_def(n.op).loops) continue;
    const LoopNest nest = op_def(n.op).loops(g, n);
    const std::vector<bool> loops = tied_loops(g, i, nest, tied);
    for (size_t d = 0; d < nest.output.size(); ++d)
      tied[size_t(i)][d] = nest.output[d] >= 0 && loops[size_t(nest.output[d])];
  }
  return tied;
}

}  // namespace autoshard
