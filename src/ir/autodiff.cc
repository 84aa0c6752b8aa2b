#include "autoshard/ir/autodiff.h"

#include <algorithm>
#include <map>
#include <optional>
#include <string>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/op_def.h"

namespace autoshard {

namespace {

// Contributions stacked into one einsum, or joined by one concat, only from
// this many on: a weight or a sequence used at every step of a recurrence,
// not a layer shared twice or a fused projection split in three.
constexpr size_t kMinStacked = 4;

// The values (one shape) stacked along a new first axis: [n, ...].
Value stack(const std::vector<Value>& v) {
  std::vector<Value> rows;
  for (const Value& x : v) {
    Shape s = x.shape();
    s.insert(s.begin(), 1);
    rows.push_back(ops::reshape(x, s));
  }
  return ops::concat(rows, 0);
}

// Where a pad made by this differentiation (id >= first_new) puts its input
// when it pads along one axis only (a crop's gradient): the axis and the
// input's first position there; axis -1 for any other value.
struct Placement {
  int axis = -1;
  int64_t begin = 0;
};
Placement placement(const Graph& g, Value v, int first_new) {
  const PadAttrs* pad = v.id < first_new ? nullptr : g.node(v.id).attr_if<PadAttrs>();
  if (pad == nullptr) return {};
  Placement at;
  for (size_t d = 0; d < pad->lo.size(); ++d) {
    if (pad->lo[d] < 0 || pad->hi[d] < 0) return {};
    if (pad->lo[d] == 0 && pad->hi[d] == 0) continue;
    if (at.axis >= 0) return {};
    at = {static_cast<int>(d), pad->lo[d]};
  }
  return at;
}

// The gradients of many crops of one value along one axis -- the steps of
// a sequence -- are pads of disjoint runs to the whole: their sum is their
// inputs concatenated (zeros between), moving the whole once instead of
// once per crop. Nothing when runs overlap (left to the adds).
std::optional<Value> joined_crops(Graph& g, const std::vector<Value>& parts,
                                  std::vector<size_t> members, int axis,
                                  const std::vector<Placement>& at) {
  std::sort(members.begin(), members.end(),
            [&](size_t a, size_t b) { return at[a].begin < at[b].begin; });
  std::vector<Value> placed;
  for (size_t k : members) placed.push_back(g.value(g.node(parts[k].id).inputs[0]));
  for (size_t i = 1; i < members.size(); ++i)
    if (at[members[i]].begin < at[members[i - 1]].begin + placed[i - 1].dim(axis)) return {};
  const Shape whole = parts[members[0]].shape();
  auto zeros = [&](int64_t from, int64_t to) {
    Shape gap = whole;
    gap[axis] = to - from;
    return ops::constant(g, gap, 0.0);
  };
  std::vector<Value> runs;
  int64_t next = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (at[members[i]].begin > next) runs.push_back(zeros(next, at[members[i]].begin));
    runs.push_back(placed[i]);
    next = at[members[i]].begin + placed[i].dim(axis);
  }
  if (next < whole[axis]) runs.push_back(zeros(next, whole[axis]));
  return ops::concat(runs, axis);
}

// The sum of one value's gradient contributions. Einsums made by this
// differentiation (id >= first_new) with one equation over operands of the
// same shapes -- a recurrent kernel's gradient at each time step, h_t^T dz_t
// -- are summed as ONE einsum over their operands stacked along a new
// contracted letter: one large product instead of T thin ones (a reduction
// of the batch only) and T adds of the whole weight. Pads placing crops'
// gradients along one axis are joined by one concat (joined_crops).
Value sum_parts(Graph& g, const std::vector<Value>& parts, int first_new) {
  std::map<std::string, std::vector<size_t>> groups;
  std::map<int, std::vector<size_t>> placed;  // by axis
  std::vector<Placement> at(parts.size());
  for (size_t k = 0; k < parts.size(); ++k) {
    at[k] = placement(g, parts[k], first_new);
    if (at[k].axis >= 0) placed[at[k].axis].push_back(k);
    const Node& n = g.node(parts[k].id);
    if (parts[k].id < first_new || n.attr_if<EinsumAttrs>() == nullptr) continue;
    const Value a = g.value(n.inputs[0]), b = g.value(n.inputs[1]);
    groups[n.attr<EinsumAttrs>().equation() + shape_str(a.shape()) + shape_str(b.shape())]
        .push_back(k);
  }
  std::vector<bool> stacked(parts.size(), false);
  std::vector<Value> terms;
  for (const auto& [axis, members] : placed) {
    if (members.size() < kMinStacked) continue;
    if (std::optional<Value> joined = joined_crops(g, parts, members, axis, at)) {
      terms.push_back(*joined);
      for (size_t k : members) stacked[k] = true;
    }
  }
  for (const auto& [key, members] : groups) {
    if (members.size() < kMinStacked) continue;
    const Node& first = g.node(parts[members[0]].id);
    const EinsumAttrs e = first.attr<EinsumAttrs>();
    char t = 'a';  // a letter the equation does not use
    while (e.equation().find(t) != std::string::npos) t = t == 'z' ? 'A' : char(t + 1);
    std::vector<Value> as, bs;
    for (size_t k : members) {
      const Node& n = g.node(parts[k].id);
      as.push_back(g.value(n.inputs[0]));
      bs.push_back(g.value(n.inputs[1]));
      stacked[k] = true;
    }
    terms.push_back(
        ops::einsum(std::string(1, t) + e.a + "," + std::string(1, t) + e.b + "->" + e.out,
                    stack(as), stack(bs)));
  }
  for (size_t k = 0; k < parts.size(); ++k)
    if (!stacked[k]) terms.push_back(parts[k]);
  Value sum = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) sum = ops::add(sum, terms[k]);
  return sum;
}

}  // namespace

std::vector<Value> gradients(Value loss, const std::vector<Value>& wrt) {
  Graph& g = *loss.graph;
  AS_CHECK(loss.shape().empty(), "gradients: the loss must be a scalar, got ",
           shape_str(loss.shape()));
  const int end = loss.id + 1;  // nodes after the loss cannot influence it

  // Which nodes lie on a path from a wrt value to the loss.
  std::vector<bool> needs(end, false);
  for (const Value& v : wrt) {
    const Node& n = v.node();
    AS_CHECK(n.dtype != DType::BF16,
             "gradients: ", n.is_leaf() ? cat("weight '", n.leaf().name, "'") : cat("value ", v.id),
             " is held in bf16, which takes no gradient (a frozen weight); train it in f32 "
             "(leave it trainable, or do not hold frozen weights in bf16)");
    if (v.id < end) needs[v.id] = true;
  }
  for (int i = 0; i < end; ++i)
    for (int in : g.node(i).inputs)
      if (needs[in]) needs[i] = true;

  // Each node's contributions are kept until its own turn (its consumers,
  // all later nodes, have given theirs), then summed. The sum joins the
  // block of the last consumer to contribute (as the pairwise adds did), so
  // repeated blocks stay alike for the planner.
  const int first_new = g.size();
  std::vector<std::vector<Value>> parts(end);
  std::vector<int> sum_block(end, -1);
  std::vector<Value> grad(end);
  auto total = [&](int id) {
    if (!grad[id].valid() && !parts[id].empty()) {
      g.set_block(sum_block[id]);
      grad[id] = parts[id].size() == 1 ? parts[id][0] : sum_parts(g, parts[id], first_new);
      parts[id].clear();
    }
    return grad[id];
  };
  grad[loss.id] = ops::constant(g, {}, 1.0);
  for (int i = loss.id; i >= 0; --i) {
    if (!needs[i] || !total(i).valid()) continue;
    const Node node = g.node(i);
    if (node.inputs.empty()) continue;
    bool any = false;
    for (int in : node.inputs) any = any || needs[in];
    if (!any) continue;
    const OpDef& def = op_def(node.op);
    AS_CHECK(def.vjp != nullptr, "gradients: op ", def.name, " has no gradient rule");
    g.set_block(node.block);  // a block's gradient is part of the block
    std::vector<Value> in_grads = def.vjp(g, i, grad[i]);
    for (size_t k = 0; k < node.inputs.size(); ++k) {
      int in = node.inputs[k];
      if (!needs[in] || !in_grads[k].valid()) continue;
      parts[in].push_back(in_grads[k]);
      sum_block[in] = node.block;
    }
  }
  g.set_block(-1);
  std::vector<Value> out;
  for (const Value& v : wrt) {
    const Value d = v.id < end ? total(v.id) : Value();
    out.push_back(d.valid() ? d : ops::constant(g, v.shape(), 0.0));
  }
  return out;
}

}  // namespace autoshard
