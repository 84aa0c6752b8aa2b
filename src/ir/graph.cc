#include "autoshard/ir/graph.h"

#include <sstream>

#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {

const std::vector<OpDef>& op_table() {
  static const std::vector<OpDef> table = [] {
    std::vector<OpDef> t(static_cast<size_t>(Op::kCount));
    register_basic_ops(t);
    register_elementwise_ops(t);
    register_einsum_op(t);
    register_reduce_ops(t);
    register_nn_ops(t);
    register_attention_ops(t);
    register_rotary_op(t);
    register_cache_ops(t);
    register_shape_ops(t);
    register_optimizer_ops(t);
    register_collective_ops(t);
    register_unary_ops(t);
    register_vision_ops(t);
    register_resize_op(t);
    register_recurrent_ops(t);
    // Every op has a shape rule and a kernel; every op a global graph can
    // hold also has loops (the planner's view) and says how it shards.
    for (size_t i = 0; i < t.size(); ++i) {
      if (!t[i].name || !t[i].infer || !t[i].kernel)
        throw std::logic_error("op " + std::to_string(i) + " has no definition");
      if (!t[i].local_only && !t[i].loops)
        throw std::logic_error(std::string("op ") + t[i].name + " has no loops");
      if (!t[i].cost) throw std::logic_error(std::string("op ") + t[i].name + " has no cost");
    }
    return t;
  }();
  return table;
}

const OpDef& op_def(Op op) {
  return op_table()[static_cast<size_t>(op)];
}
const char* op_name(Op op) {
  return op_def(op).name;
}

const Node& Value::node() const {
  return graph->node(id);
}

int64_t Value::dim(int axis) const {
  int r = rank();
  if (axis < 0) axis += r;
  AS_CHECK(axis >= 0 && axis < r, "axis ", axis, " out of range for shape ", shape_str(shape()));
  return shape()[axis];
}

void Node::wrong_attrs() const {
  fail("internal: op ", op_name(op), " has attributes of another op");
}

Value Graph::add(Op op, std::vector<Value> inputs, OpAttrs attrs) {
  Node n{op,
         {},
         {},
         DType::F32,
         std::move(attrs),
         current_region_,
         current_region_ >= 0 ? current_region_ : current_block_};
  for (const Value& v : inputs) {
    AS_CHECK(v.graph == this, "op ", op_name(op), ": input belongs to another graph");
    if (nodes_[v.id].dtype == DType::BF16) [[unlikely]]
      check_reads_bf16(op, v.id, n.inputs.size());
    n.inputs.push_back(v.id);
  }
  ShapeAndType st = op_def(op).infer(*this, n);
  n.shape = std::move(st.shape);
  n.dtype = st.dtype;
  nodes_.push_back(std::move(n));
  const int id = size() - 1;
  if (op == Op::Parameter) parameter_ids_.emplace(nodes_[id].leaf().key(), id);
  if (op == Op::Input) input_ids_.emplace(nodes_[id].leaf().name, id);
  return Value{this, id};
}

// What names a value in an error: a weight's path, else its op.
std::string Graph::describe(int id) const {
  const Node& n = nodes_[id];
  if (n.is_leaf()) return cat("'", n.leaf().key(), "'");
  return cat("the output of ", op_name(n.op), " (node ", id, ")");
}

void Graph::check_reads_bf16(Op op, int id, size_t input) const {
  AS_CHECK(op_def(op).reads_bf16_input(input), "op ", op_name(op), " cannot read ", describe(id),
           ", which is held in bf16: only products (einsum) and embedding gathers read bf16 "
           "weights; hold it in f32 (it is read by an op that needs f32 values)");
}

bool Graph::can_hold_in_bf16(int id) const {
  const Node& w = nodes_[size_t(id)];
  if (!w.is_weight() || w.dtype != DType::F32) return false;
  for (size_t i = size_t(id) + 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (n.inputs[k] == id && !op_def(n.op).reads_bf16_input(k)) return false;
  }
  return true;
}

void Graph::hold_in_bf16(int id) {
  AS_CHECK(can_hold_in_bf16(id), "internal: ", describe(id),
           " cannot be held in bf16 (not an f32 weight, or an op reads it as f32)");
  Node& w = nodes_[size_t(id)];
  w.dtype = DType::BF16;
  std::get<LeafAttrs>(w.attrs).dtype = DType::BF16;
  // The readers' outputs must not change (OpDef::reads_bf16's promise).
  for (size_t i = size_t(id) + 1; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (std::find(n.inputs.begin(), n.inputs.end(), id) == n.inputs.end()) continue;
    const ShapeAndType st = op_def(n.op).infer(*this, n);
    AS_CHECK(st.shape == n.shape && st.dtype == n.dtype, "internal: op ", op_name(n.op),
             " changes its output when ", describe(id), " is bf16");
  }
}

Value Graph::parameter(const std::string& path, Shape shape, DType dtype) {
  if (int id = find_parameter(path); id >= 0) {
    AS_CHECK(nodes_[id].shape == shape, "parameter ", path, " declared twice with shapes ",
             shape_str(nodes_[id].shape), " and ", shape_str(shape));
    return Value{this, id};
  }
  LeafAttrs leaf{path, "", std::move(shape), dtype};
  if (auto it = weight_formats_.find(path); it != weight_formats_.end()) leaf.format = it->second;
  return add(Op::Parameter, {}, std::move(leaf));
}

Value Graph::optimizer_slot(const std::string& slot, const std::string& weight_path, Shape shape) {
  LeafAttrs a{weight_path, slot, std::move(shape), DType::F32};
  if (int id = find_parameter(a.key()); id >= 0) return Value{this, id};
  return add(Op::Parameter, {}, std::move(a));
}

Value Graph::buffer(const std::string& path, Shape shape) {
  LeafAttrs a{path, "", std::move(shape), DType::F32, /*buffer=*/true};
  if (int id = find_parameter(a.key()); id >= 0) {
    AS_CHECK(nodes_[id].shape == a.shape, "buffer ", path, " declared twice with shapes ",
             shape_str(nodes_[id].shape), " and ", shape_str(a.shape));
    return Value{this, id};
  }
  return add(Op::Parameter, {}, std::move(a));
}

Value Graph::input(const std::string& name, Shape shape, DType dtype) {
  AS_CHECK(find_input(name) < 0, "input ", name, " declared twice");
  return add(Op::Input, {}, LeafAttrs{name, "", std::move(shape), dtype});
}

int Graph::find_parameter(const std::string& key) const {
  auto it = parameter_ids_.find(key);
  return it == parameter_ids_.end() ? -1 : it->second;
}

int Graph::find_input(const std::string& name) const {
  auto it = input_ids_.find(name);
  return it == input_ids_.end() ? -1 : it->second;
}

int Graph::open_region() {
  return current_region_ = regions_++;
}

std::vector<int> Graph::parameters() const {
  std::vector<int> ids;
  for (int i = 0; i < size(); ++i)
    if (nodes_[i].op == Op::Parameter) ids.push_back(i);
  return ids;
}

std::vector<int> Graph::inputs() const {
  std::vector<int> ids;
  for (int i = 0; i < size(); ++i)
    if (nodes_[i].op == Op::Input) ids.push_back(i);
  return ids;
}

std::string Graph::to_string() const {
  std::ostringstream out;
  for (int i = 0; i < size(); ++i) {
    const Node& n = nodes_[i];
    out << "%" << i << " = " << op_name(n.op);
    if (n.is_leaf()) out << "[" << n.leaf().key() << "]";
    if (n.is_leaf() && n.leaf().format != WeightsDType::F32)
      out << "[held in " << weights_dtype_name(n.leaf().format) << "]";
    if (const auto* e = std::get_if<EinsumAttrs>(&n.attrs)) out << "[" << e->equation() << "]";
    out << "(";
    for (size_t k = 0; k < n.inputs.size(); ++k) out << (k ? ", " : "") << "%" << n.inputs[k];
    out << ") : " << dtype_name(n.dtype) << shape_str(n.shape) << "\n";
  }
  return out.str();
}

std::vector<bool> live_nodes(const Graph& g, const std::vector<int>& outputs) {
  std::vector<bool> live(g.size(), false);
  for (int o : outputs) live[o] = true;
  for (int i = 0; i < g.size(); ++i)
    if (op_def(g.node(i).op).side_effect) live[i] = true;
  for (int i = g.size() - 1; i >= 0; --i)
    if (live[i])
      for (int in : g.node(i).inputs) live[in] = true;
  return live;
}

const Shape& input_shape(const Graph& g, const Node& n, int i) {
  return g.node(n.inputs[i]).shape;
}
DType input_dtype(const Graph& g, const Node& n, int i) {
  return g.node(n.inputs[i]).dtype;
}

void expect_inputs(const Node& n, size_t count) {
  AS_CHECK(n.inputs.size() == count, "op ", op_def(n.op).name ? op_def(n.op).name : "?", " takes ",
           count, " inputs, got ", n.inputs.size());
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t k = 0; k < r; ++k) {
    int64_t da = k < r - a.size() ? 1 : a[k - (r - a.size())];
    int64_t db = k < r - b.size() ? 1 : b[k - (r - b.size())];
    AS_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
             " do not broadcast");
    out[k] = da == 1 ? db : da;
  }
  return out;
}

LoopNest broadcast_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  for (int64_t d : n.shape) nest.output.push_back(nest.add({d}));
  for (size_t k = 0; k < n.inputs.size(); ++k) {
    const Shape& s = input_shape(g, n, static_cast<int>(k));
    const size_t lead = n.shape.size() - s.size();
    std::vector<int> dims;
    for (size_t j = 0; j < s.size(); ++j)
      dims.push_back(s[j] == n.shape[j + lead] ? int(j + lead) : -1);
    nest.inputs.push_back(dims);
  }
  return nest;
}

double elements(const Shape& s) {
  double n = 1;
  for (int64_t d : s) n *= double(d);
  return n;
}

OpCost streaming_cost(const CostShapes& shapes, double flops_per_element) {
  double bytes = elements(shapes.output) * 4;
  for (const Shape& s : shapes.inputs) bytes += elements(s) * 4;
  return {elements(shapes.output) * flops_per_element, bytes, false};
}

}  // namespace autoshard
