#include "ir/loop_nest.h"

#include <algorithm>

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
      d.output.partial.push_back(split[l]);
      d.output.partial_op = nest.loops[l].reduce;
    }
  std::sort(d.output.partial.begin(), d.output.partial.end());
  return d;
}

ShardDecision follow_inputs(const LoopNest& nest, const std::vector<Sharding>& inputs) {
  LoopSplit split(nest.loops.size(), -1);
  std::vector<int> used;
  for (size_t i = 0; i < inputs.size() && i < nest.inputs.size(); ++i)
    for (size_t d = 0; d < nest.inputs[i].size() && d < inputs[i].dims.size(); ++d) {
      const int loop = nest.inputs[i][d], axis = inputs[i].dims[d];
      if (loop < 0 || axis < 0 || split[loop] >= 0 || !nest.splittable(loop) ||
          std::find(used.begin(), used.end(), axis) != used.end())
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

std::vector<LoopSplit> enumerate_splits(const LoopNest& nest, const DeviceMesh& mesh) {
  std::vector<LoopSplit> out{LoopSplit(nest.loops.size(), -1)};
  for (int axis = 0; axis < mesh.rank(); ++axis) {
    if (mesh.axis_size(axis) == 1) continue;
    const size_t before = out.size();
    for (size_t s = 0; s < before; ++s)
      for (size_t l = 0; l < nest.loops.size(); ++l) {
        if (!nest.splittable(static_cast<int>(l)) || out[s][l] >= 0) continue;
        LoopSplit next = out[s];
        next[l] = axis;
        if (consistent(nest, next)) out.push_back(std::move(next));
      }
  }
  return out;
}

std::vector<ShardDecision> enumerate_strategies(const LoopNest& nest, const DeviceMesh& mesh,
                                                bool linear) {
  std::vector<ShardDecision> out;
  for (const LoopSplit& split : enumerate_splits(nest, mesh)) {
    out.push_back(decide(nest, split));
    if (!linear || !out.back().output.partial.empty()) continue;
    const ShardDecision whole = out.back();
    for (int axis = 0; axis < mesh.rank(); ++axis) {
      if (mesh.axis_size(axis) == 1 || std::find(split.begin(), split.end(), axis) != split.end())
        continue;
      ShardDecision d = whole;
      for (Sharding& in : d.inputs) in.partial = {axis};
      d.output.partial = {axis};
      out.push_back(std::move(d));
    }
  }
  return out;
}

}  // namespace autoshard
