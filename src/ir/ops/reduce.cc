// ReduceSum and its adjoint BroadcastTo.
#include <algorithm>
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/op_def.h"
#include "tensor/broadcast.h"

namespace autoshard {
namespace {

// The input shape with reduced axes kept as 1.
Shape keepdims_shape(const Shape& in, const std::vector<int64_t>& axes) {
  Shape s = in;
  for (int64_t a : axes) s[a] = 1;
  return s;
}

ShapeAndType reduce_sum_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& in = input_shape(g, n, 0);
  std::vector<bool> reduced(in.size(), false);
  for (int64_t a : n.attr<AxesAttrs>().axes) {
    AS_CHECK(a >= 0 && a < static_cast<int64_t>(in.size()), "reduce_sum: axis ", a,
             " out of range for ", shape_str(in));
    AS_CHECK(!reduced[a], "reduce_sum: axis ", a, " listed twice");
    reduced[a] = true;
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i)
    if (!reduced[i]) out.push_back(in[i]);
  return {out, DType::F32};
}

void reduce_sum_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext&) {
  const Tensor& x = *in[0];
  std::fill_n(out.f32(), out.numel(), 0.0f);
  BroadcastPlan plan =
      plan_broadcast(x.shape(), {keepdims_shape(x.shape(), n.attr<AxesAttrs>().axes)});
  const float* px = x.f32();
  float* po = out.f32();
  for_each_run(plan, [&](int64_t xo, const std::vector<int64_t>& off, int64_t len,
                         const std::vector<int64_t>& st) {
    const float* src = px + xo;
    float* dst = po + off[0];
    if (st[0] == 0) {
      float s = 0;
      for (int64_t i = 0; i < len; ++i) s += src[i];
      *dst += s;
    } else {
      for (int64_t i = 0; i < len; ++i) dst[i] += src[i];
    }
  });
}

std::vector<Value> reduce_sum_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  const Shape in = input_shape(g, n, 0);
  return {ops::broadcast_to(ops::reshape(dy, keepdims_shape(in, n.attr<AxesAttrs>().axes)), in)};
}

ShapeAndType broadcast_to_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& in = input_shape(g, n, 0);
  const Shape& to = n.attr<ShapeAttrs>().shape;
  AS_CHECK(broadcast_shapes(in, to) == to, "cannot broadcast ", shape_str(in), " to ",
           shape_str(to));
  return {to, DType::F32};
}

void broadcast_to_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                         const KernelContext&) {
  BroadcastPlan plan = plan_broadcast(out.shape(), {in[0]->shape()});
  const float* px = in[0]->f32();
  float* po = out.f32();
  for_each_run(plan, [&](int64_t oo, const std::vector<int64_t>& off, int64_t len,
                         const std::vector<int64_t>& st) {
    if (st[0] == 0)
      std::fill_n(po + oo, len, px[off[0]]);
    else
      std::memcpy(po + oo, px + off[0], len * sizeof(float));
  });
}

std::vector<Value> broadcast_to_vjp(Graph& g, int id, Value dy) {
  return {ops::sum_to(dy, input_shape(g, g.node(id), 0))};
}

// Reducing a split dimension leaves partial sums over its mesh axis.
ShardDecision reduce_sum_rule(const ShardQuery& q) {
  const Sharding in = partial_sum(q.inputs[0]) ? q.inputs[0] : without_partial(q.inputs[0]);
  const std::vector<int64_t>& axes = q.node.attr<AxesAttrs>().axes;
  Sharding out{{}, in.partial};
  for (int d = 0; d < in.rank(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (!reduced)
      out.dims.push_back(in.dims[d]);
    else
      add_partial(out.partial, in.dims[d]);
  }
  return {{in}, out};
}

// Dimensions that stay keep their split; broadcast ones are whole everywhere.
ShardDecision broadcast_to_rule(const ShardQuery& q) {
  const Shape& in_shape = input_shape(q.graph, q.node, 0);
  const Shape& out_shape = q.node.shape;
  const size_t lead = out_shape.size() - in_shape.size();
  Sharding in = q.inputs[0];
  Sharding out{std::vector<int>(out_shape.size(), -1), in.partial};
  for (size_t j = 0; j < in_shape.size(); ++j) {
    if (in_shape[j] != out_shape[j + lead]) in.dims[j] = -1;
    out.dims[j + lead] = in.dims[j];
  }
  return {{in}, out};
}

void broadcast_to_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<ShapeAttrs>(a).shape = info.local_output_shape();
}

// Kept axes are parallel, summed ones reductions.
LoopNest reduce_sum_loops(const Graph& g, const Node& n) {
  const Shape& in = input_shape(g, n, 0);
  const std::vector<int64_t>& axes = n.attr<AxesAttrs>().axes;
  LoopNest nest;
  std::vector<int> dims;
  for (size_t d = 0; d < in.size(); ++d) {
    const bool summed = std::find(axes.begin(), axes.end(), int64_t(d)) != axes.end();
    dims.push_back(nest.add({in[d], summed ? Loop::Kind::Reduction : Loop::Kind::Parallel}));
    if (!summed) nest.output.push_back(dims.back());
  }
  nest.inputs.push_back(dims);
  return nest;
}

OpCost reduce_cost(const Node&, const CostShapes& s) {
  return {elements(s.inputs[0]), 4 * (elements(s.inputs[0]) + elements(s.output)), false};
}
OpCost copy_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 0);
}

}  // namespace

void register_reduce_ops(std::vector<OpDef>& t) {
  t[size_t(Op::ReduceSum)] = {.name = "reduce_sum",
                              .infer = reduce_sum_infer,
                              .kernel = reduce_sum_kernel,
                              .vjp = reduce_sum_vjp,
                              .shard = reduce_sum_rule,
                              .loops = reduce_sum_loops,
                              .linearity = Linearity::Unary,
                              .cost = reduce_cost,
                              .makes_weight_gradient = true};
  t[size_t(Op::BroadcastTo)] = {.name = "broadcast_to",
                                .infer = broadcast_to_infer,
                                .kernel = broadcast_to_kernel,
                                .vjp = broadcast_to_vjp,
                                .shard = broadcast_to_rule,
                                .localize = broadcast_to_localize,
                                .loops = broadcast_loops,
                                .linearity = Linearity::Unary,
                                .cost = copy_cost};
}

}  // namespace autoshard
