#include "ir/shard_rule.h"

#include <algorithm>

#include "ir/op_def.h"

namespace autoshard {

ShardDecision replicate_all(const ShardQuery& q) {
  ShardDecision d;
  for (int in : q.node.inputs)
    d.inputs.push_back(Sharding::replicated(q.graph.node(in).shape.size()));
  d.output = Sharding::replicated(q.node.shape.size());
  return d;
}

Sharding without_partial(Sharding s) {
  s.partial.clear();
  s.partial_op = ReduceOp::Sum;
  return s;
}

bool partial_sum(const Sharding& s) {
  return !s.partial.empty() && s.partial_op == ReduceOp::Sum;
}

bool overlaps_any(const std::vector<int>& used, int axis) {
  return std::any_of(used.begin(), used.end(), [&](int u) { return axes_overlap(u, axis); });
}

void add_partial(std::vector<int>& partial, int axis) {
  for (int a : axis_members(axis))
    if (std::find(partial.begin(), partial.end(), a) == partial.end()) partial.push_back(a);
  std::sort(partial.begin(), partial.end());
}

namespace {
bool uses(const std::vector<int>& dims, int axis) {
  return overlaps_any(dims, axis);
}
}  // namespace

ShardDecision elementwise_rule(const ShardQuery& q, Linearity linearity) {
  // Partial maxima pass through no arithmetic: they are combined first.
  for (const Sharding& in : q.inputs)
    if (!in.partial.empty() && in.partial_op != ReduceOp::Sum) linearity = Linearity::None;
  const Shape& out = q.node.shape;
  const int R = static_cast<int>(out.size());
  const size_t n = q.node.inputs.size();
  std::vector<int> dims(R, -1);
  for (size_t k = 0; k < n; ++k) {
    const Shape& s = q.graph.node(q.node.inputs[k]).shape;
    const int lead = R - static_cast<int>(s.size());
    for (size_t j = 0; j < s.size(); ++j) {
      const int od = static_cast<int>(j) + lead, axis = q.inputs[k].dims[j];
      if (axis >= 0 && s[j] == out[od] && dims[od] < 0 && !uses(dims, axis)) dims[od] = axis;
    }
  }
  // Which operands may keep their partial sums, and which sums the output has.
  std::vector<bool> keeps(n, false);
  std::vector<int> partial;
  auto has = [&](size_t k) { return !q.inputs[k].partial.empty(); };
  switch (linearity) {
    case Linearity::None:
      break;
    case Linearity::Unary:
      keeps[0] = true;
      partial = q.inputs[0].partial;
      break;
    case Linearity::Sum:
      if (std::all_of(q.inputs.begin(), q.inputs.end(),
                      [&](const Sharding& s) { return s.partial == q.inputs[0].partial; })) {
        std::fill(keeps.begin(), keeps.end(), true);
        partial = q.inputs[0].partial;
      }
      break;
    case Linearity::Product: {
      int carriers = 0;
      for (size_t k = 0; k < n; ++k) carriers += has(k);
      for (size_t k = 0; k < n && carriers == 1; ++k)
        if (has(k)) keeps[k] = true, partial = q.inputs[k].partial;
      break;
    }
    case Linearity::Numerator:
      if (has(0) && !has(1)) keeps[0] = true, partial = q.inputs[0].partial;
      break;
    case Linearity::Second:
      if (!has(0) && has(1)) keeps[1] = true, partial = q.inputs[1].partial;
      break;
  }
  // An axis cannot both split a dimension and hold partial sums.
  if (std::any_of(partial.begin(), partial.end(), [&](int a) { return uses(dims, a); })) {
    partial.clear();
    std::fill(keeps.begin(), keeps.end(), false);
  }
  ShardDecision d;
  for (size_t k = 0; k < n; ++k) {
    const Shape& s = q.graph.node(q.node.inputs[k]).shape;
    const int lead = R - static_cast<int>(s.size());
    Sharding req = Sharding::replicated(s.size());
    for (size_t j = 0; j < s.size(); ++j)
      if (s[j] == out[j + lead]) req.dims[j] = dims[j + lead];
    if (keeps[k]) req.partial = partial;
    d.inputs.push_back(std::move(req));
  }
  d.output = {dims, partial};
  return d;
}

ShardDecision row_rule(const ShardQuery& q, int trailing) {
  Sharding s = without_partial(q.inputs[0]);
  for (int i = 0; i < trailing && i < s.rank(); ++i) s.dims[s.rank() - 1 - i] = -1;
  return {std::vector<Sharding>(q.node.inputs.size(), s), s};
}

}  // namespace autoshard
