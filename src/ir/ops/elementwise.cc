// Elementwise ops: arithmetic with numpy broadcasting, activations and their
// derivatives, and dropout.
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"
#include "tensor/broadcast.h"
#include "tensor/fast_math.h"
#include "tensor/rng.h"

namespace autoshard {
namespace {

ShapeAndType binary_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && input_dtype(g, n, 1) == DType::F32, op_name(n.op),
           " needs f32 operands");
  return {broadcast_shapes(input_shape(g, n, 0), input_shape(g, n, 1)), DType::F32};
}

ShapeAndType one_operand_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32, op_name(n.op), " needs an f32 operand");
  return {input_shape(g, n, 0), DType::F32};
}

// Applies f(a, b) over broadcast operands, with the inner loop specialised on
// unit or zero strides so it vectorises; runs are split over the cores.
template <typename F>
void binary_apply(std::span<Tensor* const> in, Tensor& out, F f) {
  const BroadcastPlan plan = plan_broadcast(out.shape(), {in[0]->shape(), in[1]->shape()});
  const float* a = in[0]->f32();
  const float* b = in[1]->f32();
  float* o = out.f32();
  auto run = [&](int64_t oo, const std::vector<int64_t>& off, int64_t n,
                 const std::vector<int64_t>& st) {
    const float* pa = a + off[0];
    const float* pb = b + off[1];
    float* po = o + oo;
    if (st[0] == 1 && st[1] == 1) {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], pb[i]);
    } else if (st[0] == 1 && st[1] == 0) {
      const float vb = *pb;
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i], vb);
    } else if (st[0] == 0 && st[1] == 1) {
      const float va = *pa;
      for (int64_t i = 0; i < n; ++i) po[i] = f(va, pb[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) po[i] = f(pa[i * st[0]], pb[i * st[1]]);
    }
  };
  const int64_t length = run_length(plan);
  if (run_count(plan) == 1 && length > 1) {
    // One long run (same shapes): split the run itself.
    const std::vector<int64_t> st{plan.strides[0].back(), plan.strides[1].back()};
    parallel_for(length, grain_for(1), [&](int64_t b0, int64_t b1) {
      run(b0, {b0 * st[0], b0 * st[1]}, b1 - b0, st);
    });
    return;
  }
  parallel_for(run_count(plan), grain_for(length),
               [&](int64_t r0, int64_t r1) { for_each_run(plan, r0, r1, run); });
}

template <typename F>
void unary_apply(const Tensor& x, Tensor& out, F f) {
  const float* px = x.f32();
  float* po = out.f32();
  parallel_for(x.numel(), grain_for(1), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) po[i] = f(px[i]);
  });
}

void add_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float a, float b) { return a + b; });
}
void sub_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float a, float b) { return a - b; });
}
void mul_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float a, float b) { return a * b; });
}
void div_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float a, float b) { return a / b; });
}

// Gradient rules may hold a `const Node&` while they append: graph nodes
// never move (see graph.h).
std::vector<Value> add_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {ops::sum_to(dy, input_shape(g, n, 0)), ops::sum_to(dy, input_shape(g, n, 1))};
}
std::vector<Value> sub_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {ops::sum_to(dy, input_shape(g, n, 0)),
          ops::sum_to(ops::scale(dy, -1.0), input_shape(g, n, 1))};
}
std::vector<Value> mul_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  Value a = g.value(n.inputs[0]), b = g.value(n.inputs[1]);
  return {ops::sum_to(dy * b, a.shape()), ops::sum_to(dy * a, b.shape())};
}
std::vector<Value> div_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  Value a = g.value(n.inputs[0]), b = g.value(n.inputs[1]), y = g.value(id);
  Value da = dy / b;
  Value db = ops::scale(da * y, -1.0);  // d(a/b)/db = -(a/b)/b
  return {ops::sum_to(da, a.shape()), ops::sum_to(db, b.shape())};
}

void scale_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const float s = static_cast<float>(n.attr<ScaleAttrs>().factor);
  unary_apply(*in[0], out, [s](float x) { return s * x; });
}
std::vector<Value> scale_vjp(Graph& g, int id, Value dy) {
  return {ops::scale(dy, g.node(id).attr<ScaleAttrs>().factor)};
}

// gelu: tanh approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), or exact x Phi(x).
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

void gelu_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  if (n.attr<GeluAttrs>().tanh_approximation) {
    unary_apply(*in[0], out, [](float x) {
      float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      return 0.5f * x * (1.0f + fast_tanh(u));
    });
  } else {
    unary_apply(*in[0], out, [](float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678f)); });
  }
}

void gelu_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  if (n.attr<GeluAttrs>().tanh_approximation) {
    binary_apply(in, out, [](float x, float dy) {
      float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      float t = fast_tanh(u);
      float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
      return dy * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    });
  } else {
    binary_apply(in, out, [](float x, float dy) {
      float cdf = 0.5f * (1.0f + std::erf(x * 0.70710678f));
      float pdf = 0.3989422804f * std::exp(-0.5f * x * x);
      return dy * (cdf + x * pdf);
    });
  }
}

std::vector<Value> gelu_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {g.add(Op::GeluGrad, {g.value(n.inputs[0]), dy}, n.attrs)};
}

// relu keeps NaN (PyTorch's and TensorFlow's do): `x > 0 ? x : 0` would map
// it to 0 and hide a diverged input from every loss after it. Its gradient
// follows PyTorch's threshold_backward: zero where x <= 0, dy elsewhere.
void relu_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  unary_apply(*in[0], out, [](float x) { return x < 0.0f ? 0.0f : x; });
}
void relu_grad_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float x, float dy) { return x <= 0.0f ? 0.0f : dy; });
}
std::vector<Value> relu_vjp(Graph& g, int id, Value dy) {
  return {g.add(Op::ReluGrad, {g.value(g.node(id).inputs[0]), dy})};
}
// relu_grad(x, dy) is dy masked by x > 0: linear in dy (the same mask on
// the gradient), flat in x almost everywhere (no gradient). keras.ops's
// comparisons are relu_grad(a - b, 1), so a mask computed from weights
// takes no gradient, as a comparison's result in Keras.
std::vector<Value> relu_grad_vjp(Graph& g, int id, Value d) {
  const Node& n = g.node(id);
  const Value x = g.value(n.inputs[0]), dy = g.value(n.inputs[1]);
  return {Value(), ops::sum_to(g.add(Op::ReluGrad, {x, d}), dy.shape())};
}

void tanh_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  unary_apply(*in[0], out, [](float x) { return fast_tanh(x); });
}
void tanh_grad_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float y, float dy) { return dy * (1.0f - y * y); });
}
std::vector<Value> tanh_vjp(Graph& g, int id, Value dy) {
  return {g.add(Op::TanhGrad, {g.value(id), dy})};
}

// silu: x sigmoid(x); its derivative sigmoid(x) (1 + x (1 - sigmoid(x))).
// The vectorised sigmoid: with libm's scalar exp a decode step's silu over
// 2048 elements took 7 us.
void silu_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  unary_apply(*in[0], out, [](float x) { return x * fast_sigmoid(x); });
}
void silu_grad_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  binary_apply(in, out, [](float x, float dy) {
    const float s = fast_sigmoid(x);
    return dy * s * (1.0f + x * (1.0f - s));
  });
}
std::vector<Value> silu_vjp(Graph& g, int id, Value dy) {
  return {g.add(Op::SiluGrad, {g.value(g.node(id).inputs[0]), dy})};
}

// Dropout keeps element e with probability 1 - rate, keyed by (seed, step, e)
// where e is the element's index in the global value: the mask depends on
// neither the schedule nor the sharding. A dropped element is x * 0, as in
// PyTorch: a NaN or infinite x stays NaN instead of becoming 0.
void dropout_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                    const KernelContext& ctx) {
  const DropoutAttrs& a = n.attr<DropoutAttrs>();
  const float rate = static_cast<float>(a.rate);
  const float keep_scale = 1.0f / (1.0f - rate);
  const CounterRng rng(a.seed, static_cast<uint64_t>(ctx.step));
  const float* x = in[0]->f32();
  float* y = out.f32();
  if (a.origin.whole()) {
    for (int64_t e = 0; e < out.numel(); ++e)
      y[e] = x[e] * (rng.uniform(static_cast<uint64_t>(e)) >= rate ? keep_scale : 0.0f);
    return;
  }
  // A shard: walk local elements and compute each one's global index.
  const Shape& local = out.shape();
  const std::vector<int64_t> gstride = strides_of(a.origin.global_shape);
  const size_t r = local.size();
  std::vector<int64_t> idx(r, 0);
  int64_t global = 0;
  for (size_t d = 0; d < r; ++d) global += a.origin.offsets[d] * gstride[d];
  for (int64_t e = 0; e < out.numel(); ++e) {
    y[e] = x[e] * (rng.uniform(static_cast<uint64_t>(global)) >= rate ? keep_scale : 0.0f);
    for (size_t d = r; d-- > 0;) {
      global += gstride[d];
      if (++idx[d] < local[d]) break;
      global -= gstride[d] * local[d];
      idx[d] = 0;
    }
  }
}
std::vector<Value> dropout_vjp(Graph& g, int id, Value dy) {
  return {g.add(Op::Dropout, {dy}, g.node(id).attrs)};
}

ShardDecision sum_rule(const ShardQuery& q) {
  return elementwise_rule(q, Linearity::Sum);
}
ShardDecision product_rule(const ShardQuery& q) {
  return elementwise_rule(q, Linearity::Product);
}
ShardDecision quotient_rule(const ShardQuery& q) {
  return elementwise_rule(q, Linearity::Numerator);
}
ShardDecision linear_unary_rule(const ShardQuery& q) {
  return elementwise_rule(q, Linearity::Unary);
}
ShardDecision nonlinear_rule(const ShardQuery& q) {
  return elementwise_rule(q, Linearity::None);
}

// A value that is itself a block of a larger one (a pipeline's micro-batch
// of the batch) keeps its place there: a shard's offsets add to it.
// The mask of the block `shard` of the whole dropout: each element's draw
// comes from its position in the whole (already a block, when this one is a
// block of a block: a device's shard of a micro-batch).
void dropout_place_block(OpAttrs& a, const ShardOrigin& shard) {
  ShardOrigin& origin = std::get<DropoutAttrs>(a).origin;
  if (origin.whole()) {
    origin = shard;
    return;
  }
  if (shard.whole()) return;
  for (size_t d = 0; d < origin.offsets.size(); ++d) origin.offsets[d] += shard.offsets[d];
}

void dropout_localize(OpAttrs& a, const LocalizeInfo& info) {
  dropout_place_block(a, info.output_origin());
}

// Operations per element, counted from the kernels (tanh and exp as ~12).
OpCost one_flop(const Node&, const CostShapes& s) {
  return streaming_cost(s, 1);
}
OpCost three_flops(const Node&, const CostShapes& s) {
  return streaming_cost(s, 3);
}
OpCost tanh_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 14);
}
OpCost gelu_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 20);
}
OpCost gelu_grad_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 30);
}
OpCost dropout_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 40);  // a Philox block per element
}

}  // namespace

void register_elementwise_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Add)] = {.name = "add",
                        .infer = binary_infer,
                        .kernel = add_kernel,
                        .vjp = add_vjp,
                        .shard = sum_rule,
                        .loops = broadcast_loops,
                        .linearity = Linearity::Sum,
                        .cost = one_flop,
                        .sums_inputs = true};
  t[size_t(Op::Sub)] = {.name = "sub",
                        .infer = binary_infer,
                        .kernel = sub_kernel,
                        .vjp = sub_vjp,
                        .shard = sum_rule,
                        .loops = broadcast_loops,
                        .linearity = Linearity::Sum,
                        .cost = one_flop};
  t[size_t(Op::Mul)] = {.name = "mul",
                        .infer = binary_infer,
                        .kernel = mul_kernel,
                        .vjp = mul_vjp,
                        .shard = product_rule,
                        .loops = broadcast_loops,
                        .linearity = Linearity::Product,
                        .cost = one_flop};
  t[size_t(Op::Div)] = {.name = "div",
                        .infer = binary_infer,
                        .kernel = div_kernel,
                        .vjp = div_vjp,
                        .shard = quotient_rule,
                        .loops = broadcast_loops,
                        .linearity = Linearity::Numerator,
                        .cost = one_flop};
  t[size_t(Op::Scale)] = {.name = "scale",
                          .infer = one_operand_infer,
                          .kernel = scale_kernel,
                          .vjp = scale_vjp,
                          .shard = linear_unary_rule,
                          .loops = broadcast_loops,
                          .linearity = Linearity::Unary,
                          .cost = one_flop};
  t[size_t(Op::Gelu)] = {.name = "gelu",
                         .infer = one_operand_infer,
                         .kernel = gelu_kernel,
                         .vjp = gelu_vjp,
                         .shard = nonlinear_rule,
                         .loops = broadcast_loops,
                         .cost = gelu_cost};
  t[size_t(Op::GeluGrad)] = {.name = "gelu_grad",
                             .infer = binary_infer,
                             .kernel = gelu_grad_kernel,
                             .shard = nonlinear_rule,
                             .loops = broadcast_loops,
                             .cost = gelu_grad_cost};
  t[size_t(Op::Relu)] = {.name = "relu",
                         .infer = one_operand_infer,
                         .kernel = relu_kernel,
                         .vjp = relu_vjp,
                         .shard = nonlinear_rule,
                         .loops = broadcast_loops,
                         .cost = one_flop};
  t[size_t(Op::ReluGrad)] = {.name = "relu_grad",
                             .infer = binary_infer,
                             .kernel = relu_grad_kernel,
                             .vjp = relu_grad_vjp,
                             .shard = nonlinear_rule,
                             .loops = broadcast_loops,
                             .cost = one_flop};
  t[size_t(Op::Tanh)] = {.name = "tanh",
                         .infer = one_operand_infer,
                         .kernel = tanh_kernel,
                         .vjp = tanh_vjp,
                         .shard = nonlinear_rule,
                         .loops = broadcast_loops,
                         .cost = tanh_cost};
  t[size_t(Op::TanhGrad)] = {.name = "tanh_grad",
                             .infer = binary_infer,
                             .kernel = tanh_grad_kernel,
                             .shard = nonlinear_rule,
                             .loops = broadcast_loops,
                             .cost = three_flops};
  t[size_t(Op::Silu)] = {.name = "silu",
                         .infer = one_operand_infer,
                         .kernel = silu_kernel,
                         .vjp = silu_vjp,
                         .shard = nonlinear_rule,
                         .loops = broadcast_loops,
                         .cost = tanh_cost};
  t[size_t(Op::SiluGrad)] = {.name = "silu_grad",
                             .infer = binary_infer,
                             .kernel = silu_grad_kernel,
                             .shard = nonlinear_rule,
                             .loops = broadcast_loops,
                             .cost = gelu_cost};
  t[size_t(Op::Dropout)] = {.name = "dropout",
                            .infer = one_operand_infer,
                            .kernel = dropout_kernel,
                            .vjp = dropout_vjp,
                            .shard = linear_unary_rule,
                            .localize = dropout_localize,
                            .loops = broadcast_loops,
                            .linearity = Linearity::Unary,
                            .cost = dropout_cost,
                            .place_block = dropout_place_block};
}

}  // namespace autoshard
