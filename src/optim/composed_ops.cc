#include "autoshard/optim/composed_ops.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/op_def.h"

namespace autoshard::composed {

namespace {

Value scalar(Graph& g, double v) {
  return ops::constant(g, {}, v);
}

// A target's view for an assign: [d0, 1, d1, ...], a cache of one position
// per row, so that every real dimension stays a parallel loop of the write.
Shape assign_view_shape(const Shape& s) {
  Shape view = s;
  if (view.empty()) view.push_back(1);
  view.insert(view.begin() + 1, 1);
  return view;
}

}  // namespace

// NaN in: NaN out, as PyTorch's maximum, minimum and clamp (relu keeps NaN).
// Two infinities of one sign meet in inf - inf, so those give NaN where
// PyTorch gives the infinity: non-finite either way, never a finite value.
Value maximum(Value a, Value b) {
  return a + ops::relu(b - a);
}

Value minimum(Value a, Value b) {
  return a - ops::relu(a - b);
}

Value clip(Value x, double lo, double hi) {
  AS_CHECK(lo <= hi, "clip: lower bound ", lo, " above upper bound ", hi);
  Graph& g = *x.graph;
  // lo + relu(x - lo) - relu(x - hi): x inside, the bounds outside.
  return scalar(g, lo) + ops::relu(x - scalar(g, lo)) - ops::relu(x - scalar(g, hi));
}

Value assign(Value target, Value value) {
  AS_CHECK(target.node().is_parameter(), "assign: the target must be a parameter");
  AS_CHECK(target.shape() == value.shape(), "assign: value ", shape_str(value.shape()),
           " does not match its target ", shape_str(target.shape()));
  Graph& g = *target.graph;
  const Shape view = assign_view_shape(target.shape());
  return ops::cache_write(ops::reshape(target, view), ops::reshape(value, view), ops::iota(g, {1}));
}

std::vector<int> assign_views(const Graph& g) {
  std::vector<int> views;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.is_leaf() || !op_def(n.op).writes_in_place()) continue;
    const Node& view = g.node(n.inputs[0]);
    if (!view.is_leaf() && op_def(view.op).is_view() && g.node(view.inputs[0]).is_parameter())
      views.push_back(n.inputs[0]);
  }
  return views;
}

}  // namespace autoshard::composed
