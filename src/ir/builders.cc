// The tracing builders of autoshard/ops.h.
#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/einsum_equation.h"

namespace autoshard::ops {
namespace {
// Sums the letters of `term` that appear nowhere in `keep`, returning the
// reduced value and its remaining term.
std::pair<Value, std::string> presum(Value x, const std::string& term, const std::string& keep) {
  std::vector<int64_t> axes;
  std::string rest;
  for (size_t i = 0; i < term.size(); ++i) {
    if (keep.find(term[i]) == std::string::npos)
      axes.push_back(static_cast<int64_t>(i));
    else
      rest += term[i];
  }
  if (axes.empty()) return {x, term};
  return {reduce_sum(x, axes), rest};
}
}  // namespace

Value einsum(const std::string& equation, Value a, Value b) {
  EinsumEquation e = parse_einsum(equation);
  auto [ra, ta] = presum(a, e.a, e.b + e.out);
  auto [rb, tb] = presum(b, e.b, ta + e.out);
  // A product over a weight held in a compact format (Graph::hold_weights)
  // says so: b first, the usual place of a layer's kernel.
  for (int k : {1, 0}) {
    const Node& operand = (k == 0 ? ra : rb).node();
    if (operand.is_weight() && operand.leaf().format != WeightsDType::F32)
      return a.graph->add(Op::QuantizedEinsum, {ra, rb},
                          EinsumAttrs{ta, tb, e.out, k, operand.leaf().format});
  }
  return a.graph->add(Op::Einsum, {ra, rb}, EinsumAttrs{ta, tb, e.out});
}

Value add(Value a, Value b) {
  return a.graph->add(Op::Add, {a, b});
}
Value sub(Value a, Value b) {
  return a.graph->add(Op::Sub, {a, b});
}
Value mul(Value a, Value b) {
  return a.graph->add(Op::Mul, {a, b});
}
Value div(Value a, Value b) {
  return a.graph->add(Op::Div, {a, b});
}
Value scale(Value x, double factor) {
  return x.graph->add(Op::Scale, {x}, ScaleAttrs{factor});
}

Value constant(Graph& g, Shape shape, double value) {
  return g.add(Op::Constant, {}, FillAttrs{std::move(shape), value});
}

Value iota(Graph& g, Shape shape) {
  return g.add(Op::Iota, {}, IotaAttrs{std::move(shape)});
}

Value gelu(Value x, bool tanh_approximation) {
  return x.graph->add(Op::Gelu, {x}, GeluAttrs{tanh_approximation});
}
Value relu(Value x) {
  return x.graph->add(Op::Relu, {x});
}
Value tanh(Value x) {
  return x.graph->add(Op::Tanh, {x});
}
Value silu(Value x) {
  return x.graph->add(Op::Silu, {x});
}

Value reduce_sum(Value x, std::vector<int64_t> axes) {
  for (int64_t& a : axes) a = a < 0 ? a + x.rank() : a;
  std::sort(axes.begin(), axes.end());
  return x.graph->add(Op::ReduceSum, {x}, AxesAttrs{std::move(axes)});
}

Value reduce_mean(Value x, std::vector<int64_t> axes) {
  int64_t count = 1;
  for (int64_t a : axes) count *= x.dim(static_cast<int>(a));
  return scale(reduce_sum(x, std::move(axes)), 1.0 / static_cast<double>(count));
}

Value broadcast_to(Value x, Shape shape) {
  if (x.shape() == shape) return x;
  return x.graph->add(Op::BroadcastTo, {x}, ShapeAttrs{std::move(shape)});
}

Value sum_to(Value x, Shape shape) {
  if (x.shape() == shape) return x;
  const Shape& xs = x.shape();
  AS_CHECK(xs.size() >= shape.size(), "sum_to: cannot sum ", shape_str(xs), " to ",
           shape_str(shape));
  const size_t lead = xs.size() - shape.size();
  std::vector<int64_t> axes;
  for (size_t i = 0; i < xs.size(); ++i)
    if (i < lead || (shape[i - lead] == 1 && xs[i] != 1)) axes.push_back(static_cast<int64_t>(i));
  Value r = axes.empty() ? x : reduce_sum(x, axes);
  return r.shape() == shape ? r : reshape(r, std::move(shape));
}

Value softmax(Value x, bool causal) {
  return x.graph->add(Op::Softmax, {x}, SoftmaxAttrs{causal});
}
Value attention(Value q, Value k, Value v, bool causal, double scale, int64_t window,
                double softcap) {
  return q.graph->add(Op::Attention, {q, k, v}, AttentionAttrs{causal, scale, -1, window, softcap});
}

Value attention(Value q, Value k, Value v, Value positions, double scale, int64_t window,
                double softcap) {
  return q.graph->add(Op::Attention, {q, k, v, positions},
                      AttentionAttrs{true, scale, -1, window, softcap});
}

Value cache_write(Value cache, Value rows, Value positions) {
  return cache.graph->add(Op::CacheWrite, {cache, rows, positions});
}
Value rotary(Value x, Value positions, RotaryAttrs attrs) {
  return x.graph->add(Op::Rotary, {x, positions}, attrs);
}
Value lstm_cell(Value x, Value r, Value state, Value mask) {
  std::vector<Value> in{x, r, state};
  if (mask.valid()) in.push_back(mask);
  return x.graph->add(Op::LstmCell, in);
}
Value gru_cell(Value x, Value r, Value h, Value mask) {
  std::vector<Value> in{x, r, h};
  if (mask.valid()) in.push_back(mask);
  return x.graph->add(Op::GruCell, in);
}
Value normalize(Value x, double epsilon, bool center) {
  return x.graph->add(Op::Normalize, {x}, EpsilonAttrs{epsilon, center});
}
Value cross_entropy(Value logits, Value targets) {
  Graph& g = *logits.graph;
  Value max = g.add(Op::RowMax, {logits});
  Value stats = g.add(Op::CrossEntropyStats, {logits, targets, max}, ClassShardAttrs{});
  return g.add(Op::CrossEntropyFinish, {stats, max});
}
Value gather(Value table, Value ids, int64_t id_offset) {
  return table.graph->add(Op::Gather, {table, ids},
                          GatherAttrs{.table = {}, .id_offset = id_offset});
}

Value reshape(Value x, Shape shape) {
  if (x.shape() == shape) return x;
  return x.graph->add(Op::Reshape, {x}, ShapeAttrs{std::move(shape)});
}

Value transpose(Value x, std::vector<int64_t> perm) {
  return x.graph->add(Op::Transpose, {x}, PermAttrs{std::move(perm)});
}

Value dropout(Value x, double rate, uint64_t seed) {
  AS_CHECK(rate >= 0 && rate < 1, "dropout rate must be in [0, 1), got ", rate);
  if (rate == 0) return x;
  return x.graph->add(Op::Dropout, {x}, DropoutAttrs{rate, seed, {}});
}

}  // namespace autoshard::ops
