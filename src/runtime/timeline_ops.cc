#include "autoshard/runtime/timeline_ops.h"

#include <algorithm>
#include <climits>

#include "autoshard/error.h"
#include "autoshard/runtime/executor.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

// A weight's layer: its path without the last part ("h.0.attn.c_attn").
std::string layer_of(const LeafAttrs& leaf) {
  const size_t dot = leaf.name.rfind('.');
  return dot == std::string::npos ? leaf.name : leaf.name.substr(0, dot);
}

std::vector<std::string> layer_paths(const Graph& g) {
  const int n = g.size();
  std::vector<std::string> path(n);
  std::vector<bool> from_weight(n, false);
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (node.is_leaf()) {
      if (node.is_parameter()) path[i] = layer_of(node.leaf());
      continue;
    }
    for (int in : node.inputs)
      if (g.node(in).is_weight()) {
        path[i] = path[in];
        from_weight[i] = true;
        break;
      }
    if (from_weight[i]) continue;
    for (int in : node.inputs)
      if (!g.node(in).is_leaf() && !path[in].empty()) {
        path[i] = path[in];
        break;
      }
  }
  // Optimizer updates read the weight and its gradient: the ops that made
  // the gradient (a reshape, an all-reduce, a clip, then the product) take
  // the weight's path.
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    const int gradient = op_def(node.op).gradient_input;
    if (gradient < 0 || gradient >= int(node.inputs.size())) continue;
    int v = node.inputs[size_t(gradient)];
    for (int depth = 0; depth < 8 && !g.node(v).is_leaf() && !from_weight[v]; ++depth) {
      path[v] = path[i];
      if (op_def(g.node(v).op).makes_weight_gradient || g.node(v).inputs.empty()) break;
      v = g.node(v).inputs[0];
    }
  }
  return path;
}

std::string typed_shape(const Node& n) {
  return std::string(dtype_name(n.dtype)) + shape_str(n.shape);
}

const char* collective_kind(CommCost::Kind k) {
  switch (k) {
    case CommCost::Kind::AllReduce:
      return "all_reduce";
    case CommCost::Kind::AllGather:
      return "all_gather";
    case CommCost::Kind::ReduceScatter:
      return "reduce_scatter";
    case CommCost::Kind::AllToAll:
      return "all_to_all";
    case CommCost::Kind::None:
      break;
  }
  return "none";
}

TimelineOp describe_op(const Graph& g, int i, const std::string& path,
                       const std::vector<std::string>& axis_names) {
  const Node& node = g.node(i);
  const OpDef& def = op_def(node.op);
  std::vector<Shape> shapes;
  std::string inputs;
  for (int in : node.inputs) {
    shapes.push_back(g.node(in).shape);
    inputs += (inputs.empty() ? "" : ", ") + typed_shape(g.node(in));
  }
  TimelineOp op;
  op.name = path.empty() ? std::string(op_name(node.op)) : cat(op_name(node.op), " ", path);
  op.category = def.comm ? "collective" : "compute";
  op.args = {{"node", i}, {"inputs", inputs}, {"output", typed_shape(node)}};
  if (!path.empty()) op.args["layer"] = path;
  if (node.region >= 0) op.args["region"] = node.region;
  const CostShapes cs{shapes, node.shape};
  if (def.cost) {
    const OpCost c = def.cost(node, cs);
    op.args["flops"] = c.flops;
    op.args["bytes"] = c.bytes;
  }
  if (def.comm) {
    const CommCost c = def.comm(node, cs);
    op.args["collective"] = collective_kind(c.kind);
    op.args["bytes"] = c.bytes;
    if (const std::string name = axis_name(axis_names, c.axis); !name.empty())
      op.args["axis"] = name;
  }
  return op;
}

// Bytes alive after each node (see ProgramDescription::live_bytes), as
// plan_buffers counts lifetimes: a view or a folded sum lives in its root's
// buffer.
std::vector<double> live_after(const Graph& g, const std::vector<int>& outputs) {
  const int n = g.size();
  const BufferPlan plan = plan_buffers(g, outputs);
  std::vector<int> root(n), last(n, -1);
  double leaves = 0;
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    root[i] = op_def(node.op).aliases_input ? root[node.inputs[0]] : plan.root[i];
    last[root[i]] = std::max(last[root[i]], i);
    for (int in : node.inputs) last[root[in]] = std::max(last[root[in]], i);
    if (node.is_leaf()) leaves += double(numel(node.shape) * dtype_size(node.dtype));
  }
  for (int o : outputs) last[root[o]] = INT_MAX;
  std::vector<double> delta(n + 1, 0);  // +bytes at a value's node, -bytes after its last reader
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (node.is_leaf() || root[i] != i) continue;
    const double bytes = double(numel(node.shape) * dtype_size(node.dtype));
    delta[i] += bytes;
    if (last[i] != INT_MAX) delta[std::min(n, last[i] + 1)] -= bytes;
  }
  std::vector<double> live(n);
  double now = leaves;
  for (int i = 0; i < n; ++i) live[i] = now += delta[i];
  return live;
}

}  // namespace

ProgramDescription describe_program(const Graph& g, const std::vector<int>& outputs,
                                    const std::vector<std::string>& axis_names) {
  ProgramDescription d;
  const std::vector<std::string> paths = layer_paths(g);
  d.ops.resize(g.size());
  for (int i = 0; i < g.size(); ++i) {
    const Node& node = g.node(i);
    if (node.is_leaf()) continue;
    d.ops[i] = describe_op(g, i, paths[i], axis_names);
    d.updates = d.updates || op_def(node.op).writes_weight;
  }
  d.live_bytes = live_after(g, outputs);
  return d;
}

}  // namespace autoshard
