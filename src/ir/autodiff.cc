#include "autoshard/ir/autodiff.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/op_def.h"

namespace autoshard {

std::vector<Value> gradients(Value loss, const std::vector<Value>& wrt) {
  Graph& g = *loss.graph;
  AS_CHECK(loss.shape().empty(), "gradients: the loss must be a scalar, got ",
           shape_str(loss.shape()));
  const int end = loss.id + 1;  // nodes after the loss cannot influence it

  // Which nodes lie on a path from a wrt value to the loss.
  std::vector<bool> needs(end, false);
  for (const Value& v : wrt)
    if (v.id < end) needs[v.id] = true;
  for (int i = 0; i < end; ++i)
    for (int in : g.node(i).inputs)
      if (needs[in]) needs[i] = true;

  std::vector<Value> grad(end);
  grad[loss.id] = ops::constant(g, {}, 1.0);
  for (int i = loss.id; i >= 0; --i) {
    if (!grad[i].valid() || !needs[i]) continue;
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
      grad[in] = grad[in].valid() ? ops::add(grad[in], in_grads[k]) : in_grads[k];
    }
  }
  g.set_block(-1);
  std::vector<Value> out;
  for (const Value& v : wrt)
    out.push_back(v.id < end && grad[v.id].valid() ? grad[v.id] : ops::constant(g, v.shape(), 0.0));
  return out;
}

}  // namespace autoshard
