// Unary and UnaryGrad: one op family for the elementwise functions Keras's
// activations and losses need (sigmoid, hard_sigmoid, elu, selu, softplus,
// mish, exp, log, ...), named by an attribute instead of an op each. Each
// function is written once with its derivative beside it.
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"
#include "ir/ops/unary_kernels.h"
#include "tensor/fast_math.h"

namespace autoshard {

const char* unary_name(UnaryFn fn) {
  switch (fn) {
    case UnaryFn::Sigmoid:
      return "sigmoid";
    case UnaryFn::HardSigmoid:
      return "hard_sigmoid";
    case UnaryFn::HardSilu:
      return "hard_silu";
    case UnaryFn::Relu6:
      return "relu6";
    case UnaryFn::LeakyRelu:
      return "leaky_relu";
    case UnaryFn::Elu:
      return "elu";
    case UnaryFn::Selu:
      return "selu";
    case UnaryFn::Softplus:
      return "softplus";
    case UnaryFn::Softsign:
      return "softsign";
    case UnaryFn::Mish:
      return "mish";
    case UnaryFn::Exp:
      return "exp";
    case UnaryFn::Log:
      return "log";
    case UnaryFn::Sqrt:
      return "sqrt";
    case UnaryFn::Rsqrt:
      return "rsqrt";
    case UnaryFn::Square:
      return "square";
    case UnaryFn::Abs:
      return "abs";
    case UnaryFn::SoftCap:
      return "soft_cap";
  }
  return "?";
}

namespace {

constexpr double kSeluAlpha = 1.6732632423543772848170429916717;
constexpr double kSeluScale = 1.0507009873554804934193349852946;

double sigmoid_of(double x) {
  return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x));
}
double softplus_of(double x) {
  return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x)));
}
double hard_sigmoid_of(double x) {
  return std::min(std::max(x + 3, 0.0), 6.0) / 6;
}

// f(x), in double (the functions are cheap next to their exp and log, and
// double keeps them within float rounding of TensorFlow's).
double apply(UnaryFn fn, double a, double x) {
  switch (fn) {
    case UnaryFn::Sigmoid:
      return sigmoid_of(x);
    case UnaryFn::HardSigmoid:
      return hard_sigmoid_of(x);
    case UnaryFn::HardSilu:
      return x * hard_sigmoid_of(x);
    case UnaryFn::Relu6:
      return std::min(std::max(x, 0.0), 6.0);
    case UnaryFn::LeakyRelu:
      return x >= 0 ? x : a * x;
    case UnaryFn::Elu:
      return x > 0 ? x : a * std::expm1(x);
    case UnaryFn::Selu:
      return kSeluScale * (x > 0 ? x : kSeluAlpha * std::expm1(x));
    case UnaryFn::Softplus:
      return softplus_of(x);
    case UnaryFn::Softsign:
      return x / (1 + std::fabs(x));
    case UnaryFn::Mish:
      return x * std::tanh(softplus_of(x));
    case UnaryFn::Exp:
      return std::exp(x);
    case UnaryFn::Log:
      return std::log(x);
    case UnaryFn::Sqrt:
      return std::sqrt(x);
    case UnaryFn::Rsqrt:
      return 1 / std::sqrt(x);
    case UnaryFn::Square:
      return x * x;
    case UnaryFn::Abs:
      return std::fabs(x);
    case UnaryFn::SoftCap:
      return a * std::tanh(x / a);
  }
  return 0;
}

// f'(x).
double derivative(UnaryFn fn, double a, double x) {
  switch (fn) {
    case UnaryFn::Sigmoid: {
      const double s = sigmoid_of(x);
      return s * (1 - s);
    }
    case UnaryFn::HardSigmoid:
      return x > -3 && x < 3 ? 1.0 / 6 : 0;
    case UnaryFn::HardSilu:
      return hard_sigmoid_of(x) + (x > -3 && x < 3 ? x / 6 : 0);
    case UnaryFn::Relu6:
      return x > 0 && x < 6 ? 1 : 0;
    case UnaryFn::LeakyRelu:
      return x >= 0 ? 1 : a;
    case UnaryFn::Elu:
      return x > 0 ? 1 : a * std::exp(x);
    case UnaryFn::Selu:
      return kSeluScale * (x > 0 ? 1 : kSeluAlpha * std::exp(x));
    case UnaryFn::Softplus:
      return sigmoid_of(x);
    case UnaryFn::Softsign: {
      const double d = 1 + std::fabs(x);
      return 1 / (d * d);
    }
    case UnaryFn::Mish: {
      const double t = std::tanh(softplus_of(x));
      return t + x * (1 - t * t) * sigmoid_of(x);
    }
    case UnaryFn::Exp:
      return std::exp(x);
    case UnaryFn::Log:
      return 1 / x;
    case UnaryFn::Sqrt:
      return 0.5 / std::sqrt(x);
    case UnaryFn::Rsqrt:
      return -0.5 / (x * std::sqrt(x));
    case UnaryFn::Square:
      return 2 * x;
    case UnaryFn::Abs:
      return x > 0 ? 1 : (x < 0 ? -1 : 0);
    case UnaryFn::SoftCap: {
      const double t = std::tanh(x / a);
      return 1 - t * t;
    }
  }
  return 0;
}

ShapeAndType unary_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const UnaryAttrs& u = n.attr<UnaryAttrs>();
  AS_CHECK(input_dtype(g, n, 0) == DType::F32, unary_name(u.fn), " needs an f32 operand");
  AS_CHECK(u.fn != UnaryFn::SoftCap || (std::isfinite(u.alpha) && u.alpha > 0),
           "soft_cap needs a positive cap, not ", u.alpha);
  return {input_shape(g, n, 0), DType::F32};
}
ShapeAndType unary_grad_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  AS_CHECK(input_shape(g, n, 0) == input_shape(g, n, 1), unary_name(n.attr<UnaryAttrs>().fn),
           " gradient: x ", shape_str(input_shape(g, n, 0)), " and dy ",
           shape_str(input_shape(g, n, 1)), " differ");
  return {input_shape(g, n, 0), DType::F32};
}

// y[i] = f(x[i]) split over the cores, with f chosen once per tensor so the
// loop can be vectorised.
template <typename F>
void map_elements(const float* x, float* y, int64_t n, F f) {
  parallel_for(n, grain_for(8), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] = f(x[i]);
  });
}
template <typename F>
void map_pairs(const float* x, const float* dy, float* dx, int64_t n, F f) {
  parallel_for(n, grain_for(8), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) dx[i] = f(x[i], dy[i]);
  });
}

}  // namespace

void unary_forward_reference(UnaryFn fn, double alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(apply(fn, alpha, x[i]));
}
void unary_backward_reference(UnaryFn fn, double alpha, const float* x, const float* dy, float* dx,
                              int64_t n) {
  for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<float>(dy[i] * derivative(fn, alpha, x[i]));
}

void unary_forward(UnaryFn fn, double alpha, const float* x, float* y, int64_t n) {
  switch (fn) {
    case UnaryFn::Sigmoid:
      return map_elements(x, y, n, [](float v) { return fast_sigmoid(v); });
    case UnaryFn::Relu6:
      return map_elements(x, y, n, [](float v) { return std::min(std::max(v, 0.0f), 6.0f); });
    case UnaryFn::Square:
      return map_elements(x, y, n, [](float v) { return v * v; });
    case UnaryFn::Abs:
      return map_elements(x, y, n, [](float v) { return std::fabs(v); });
    case UnaryFn::SoftCap: {  // over a whole vocabulary of logits: kept in float
      const float cap = static_cast<float>(alpha), inv = static_cast<float>(1 / alpha);
      return map_elements(x, y, n, [=](float v) { return cap * std::tanh(v * inv); });
    }
    default:  // libm's double functions: dispatched once, computed per element
      return map_elements(x, y, n,
                          [&](float v) { return static_cast<float>(apply(fn, alpha, v)); });
  }
}

void unary_backward(UnaryFn fn, double alpha, const float* x, const float* dy, float* dx,
                    int64_t n) {
  switch (fn) {
    case UnaryFn::Sigmoid:
      return map_pairs(x, dy, dx, n, [](float v, float d) {
        // s (1 - s) with 1 - s = e s, e = exp(-x): no cancellation near s = 1.
        const float e = fast_exp(-v), s = 1.0f / (1.0f + e);
        return d * ((e * s) * s);
      });
    case UnaryFn::Square:
      return map_pairs(x, dy, dx, n, [](float v, float d) { return d * (2.0f * v); });
    default:
      return map_pairs(x, dy, dx, n, [&](float v, float d) {
        return static_cast<float>(d * derivative(fn, alpha, v));
      });
  }
}

namespace {

void unary_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const UnaryAttrs& u = n.attr<UnaryAttrs>();
  unary_forward(u.fn, u.alpha, in[0]->f32(), out.f32(), out.numel());
}
void unary_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext&) {
  const UnaryAttrs& u = n.attr<UnaryAttrs>();
  unary_backward(u.fn, u.alpha, in[0]->f32(), in[1]->f32(), out.f32(), out.numel());
}

std::vector<Value> unary_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {g.add(Op::UnaryGrad, {g.value(n.inputs[0]), dy}, n.attrs)};
}

// Partial sums never pass a nonlinear function: they are combined first.
ShardDecision unary_rule(const ShardQuery& q) {
  return elementwise_rule(q, Linearity::None);
}
// exp and log counted as ~12 operations, as the other kernels do.
OpCost unary_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 14);
}

}  // namespace

void register_unary_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Unary)] = {.name = "unary",
                          .infer = unary_infer,
                          .kernel = unary_kernel,
                          .vjp = unary_vjp,
                          .shard = unary_rule,
                          .loops = broadcast_loops,
                          .cost = unary_cost};
  t[size_t(Op::UnaryGrad)] = {.name = "unary_grad",
                              .infer = unary_grad_infer,
                              .kernel = unary_grad_kernel,
                              .shard = unary_rule,
                              .loops = broadcast_loops,
                              .cost = unary_cost};
}

namespace ops {

Value unary(Value x, UnaryFn fn, double alpha) {
  return x.graph->add(Op::Unary, {x}, UnaryAttrs{fn, alpha});
}
Value sigmoid(Value x) {
  return unary(x, UnaryFn::Sigmoid);
}
Value soft_cap(Value x, double cap) {
  return unary(x, UnaryFn::SoftCap, cap);
}

// The row maximum only shifts the sum of exponentials (it takes no
// gradient: the result does not depend on it).
Value log_softmax(Value x) {
  AS_CHECK(x.rank() >= 1, "log_softmax needs at least one axis");
  Graph& g = *x.graph;
  Shape keep = x.shape();
  keep.back() = 1;
  Value m = broadcast_to(reshape(g.add(Op::RowMax, {x}), keep), x.shape());
  Value shifted = x - m;
  Value sum = reduce_sum(unary(shifted, UnaryFn::Exp), {x.rank() - 1});
  return shifted - broadcast_to(reshape(unary(sum, UnaryFn::Log), keep), x.shape());
}

}  // namespace ops
}  // namespace autoshard
