// Optimizer update ops: the tail of a training-step Graph. They follow
// PyTorch's update rules exactly (torch.optim.SGD / Adam / AdamW and
// torch.nn.utils.clip_grad_norm_), so a step here matches a step there.
#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

ShapeAndType scalar_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32, op_name(n.op), " needs f32");
  return {{}, DType::F32};
}

// The update kernels stream several arrays once: chunks of this many
// elements (128 KiB of each array) keep every core busy with little overhead.
constexpr int64_t kUpdateGrain = 1 << 15;

// Partial sums per fixed chunk, added in chunk order: the same bits on any
// number of cores.
void sum_squares_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext&) {
  const float* x = in[0]->f32();
  const int64_t count = in[0]->numel();
  constexpr int64_t kMaxChunks = 256;
  const int64_t grain = std::max(kUpdateGrain, (count + kMaxChunks - 1) / kMaxChunks);
  double partial[kMaxChunks] = {};
  parallel_for(count, grain, [&](int64_t b, int64_t e) {
    double s = 0;
    for (int64_t i = b; i < e; ++i) s += double(x[i]) * x[i];
    partial[b / grain] = s;
  });
  double s = 0;
  for (int64_t k = 0; k < chunk_count(count, grain); ++k) s += partial[k];
  out.f32()[0] = static_cast<float>(s);
}

void clip_scale_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext&) {
  const double norm = std::sqrt(static_cast<double>(in[0]->f32()[0]));
  const double coef = n.attr<ClipAttrs>().max_norm / (norm + 1e-6);
  // min(coef, 1) that keeps a NaN norm (torch's clamp does): every gradient
  // then turns NaN, where `coef < 1 ? coef : 1` would leave them unscaled.
  out.f32()[0] = static_cast<float>(coef > 1.0 ? 1.0 : coef);
}

ShapeAndType update_infer(const Graph& g, const Node& n) {
  const size_t count = n.op == Op::AdamUpdate ? 5 : 4;
  expect_inputs(n, count);
  for (size_t i = 1; i + 1 < count; ++i)
    AS_CHECK(input_shape(g, n, i) == input_shape(g, n, 0), op_name(n.op), ": state ",
             shape_str(input_shape(g, n, i)), " does not match parameter ",
             shape_str(input_shape(g, n, 0)));
  AS_CHECK(input_shape(g, n, count - 1).empty(), op_name(n.op),
           ": the clip scale must be a scalar");
  return {{}, DType::F32};
}

// AdamUpdate(p, g, m, v, scale).
void adam_kernel(const Node& n, std::span<Tensor* const> in, Tensor&, const KernelContext& ctx) {
  float* p = in[0]->f32();
  const float* g = in[1]->f32();
  float* m = in[2]->f32();
  float* v = in[3]->f32();
  const float clip = in[4]->f32()[0];
  const AdamAttrs& a = n.attr<AdamAttrs>();
  const double b1 = a.beta_1, b2 = a.beta_2, eps = a.epsilon, wd = a.weight_decay;
  const bool decoupled = a.decoupled, epsilon_hat = a.epsilon_hat;
  const double t = static_cast<double>(ctx.step);
  const float step_size = static_cast<float>(ctx.lr / (1.0 - std::pow(b1, t)));
  const float sqrt_bc2 = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
  // Keras's step: lr sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon).
  const float hat_step_size =
      static_cast<float>(ctx.lr * std::sqrt(1.0 - std::pow(b2, t)) / (1.0 - std::pow(b1, t)));
  const float decay = static_cast<float>(1.0 - ctx.lr * wd);
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  const float feps = static_cast<float>(eps), fwd = static_cast<float>(wd);
  // One pass over weight, gradient and both moments, split over the cores;
  // `decoupled` and `epsilon_hat` are template flags so that the loop has
  // no branch and vectorises.
  auto update = [=]<bool kDecoupled, bool kHat>(int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float grad = g[i] * clip;
      if constexpr (kDecoupled)
        p[i] *= decay;
      else
        grad += fwd * p[i];
      m[i] = fb1 * m[i] + (1.0f - fb1) * grad;
      v[i] = fb2 * v[i] + (1.0f - fb2) * grad * grad;
      if constexpr (kHat)
        p[i] -= hat_step_size * m[i] / (std::sqrt(v[i]) + feps);
      else
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) / sqrt_bc2 + feps);
    }
  };
  parallel_for(in[0]->numel(), kUpdateGrain, [&](int64_t b, int64_t e) {
    if (decoupled && epsilon_hat)
      update.operator()<true, true>(b, e);
    else if (decoupled)
      update.operator()<true, false>(b, e);
    else if (epsilon_hat)
      update.operator()<false, true>(b, e);
    else
      update.operator()<false, false>(b, e);
  });
}

// SgdUpdate(p, g, buf, scale).
void sgd_kernel(const Node& n, std::span<Tensor* const> in, Tensor&, const KernelContext& ctx) {
  float* p = in[0]->f32();
  const float* g = in[1]->f32();
  float* buf = in[2]->f32();
  const float clip = in[3]->f32()[0];
  const SgdAttrs& a = n.attr<SgdAttrs>();
  const float momentum = static_cast<float>(a.momentum);
  const float wd = static_cast<float>(a.weight_decay);
  const bool nesterov = a.nesterov;
  const float lr = static_cast<float>(ctx.lr);
  const bool first = ctx.step == 1;
  parallel_for(in[0]->numel(), kUpdateGrain, [=](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      float grad = g[i] * clip + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? grad : momentum * buf[i] + grad;
        grad = nesterov ? grad + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * grad;
    }
  });
}

ShapeAndType accumulate_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && input_dtype(g, n, 1) == DType::F32 &&
               input_shape(g, n, 0) == input_shape(g, n, 1),
           "accumulate needs an f32 sum and an f32 value of its shape, got ",
           shape_str(input_shape(g, n, 0)), " and ", shape_str(input_shape(g, n, 1)));
  return {input_shape(g, n, 0), DType::F32};
}

// Accumulate(sum, g): `out` is the sum's own storage (the op aliases input
// 0). A step's first micro-batch starts the sum: no pass to zero it first.
void accumulate_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext& ctx) {
  float* sum = out.f32();
  const float* g = in[1]->f32();
  if (sum == g) return;  // fused: g's producer added itself into the sum
  const bool first = ctx.microbatch == 0;
  parallel_for(out.numel(), kUpdateGrain, [=](int64_t b, int64_t e) {
    if (first)
      std::copy(g + b, g + e, sum + b);
    else
      for (int64_t i = b; i < e; ++i) sum[i] += g[i];
  });
}

// The sum keeps its layout, partial sums included (a data-parallel
// gradient summed over micro-batches stays partial until the step reduces
// it once); the value comes to it. The value must be partial over at least
// the sum's axes: a value is never made partial.
ShardDecision accumulate_rule(const ShardQuery& q) {
  return {{q.inputs[0], q.inputs[0]}, q.inputs[0]};
}

OpCost accumulate_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 1);
}

// Local sums of squares add up over the axes that split the tensor. Partial
// sums must be reduced first; they are reduced to the layout the optimizer
// update wants, so both share one collective.
ShardDecision sum_squares_rule(const ShardQuery& q) {
  Sharding in = q.inputs[0];
  if (!in.partial.empty()) {
    const Sharding* hint = q.input_hints[0];
    in = hint && hint->rank() == in.rank() ? without_partial(*hint) : without_partial(in);
  }
  Sharding out{{}, {}};
  for (int a : in.dims) add_partial(out.partial, a);
  return {{in}, out};
}

// The update runs in the layout of its optimizer state (the first slot): the
// parameter's own, or, with ZeRO, one split further over the data axis. The
// partitioner writes a parameter updated in another layout back into place.
ShardDecision update_rule(const ShardQuery& q) {
  const Sharding state = without_partial(q.inputs[2]);
  ShardDecision d;
  for (size_t i = 0; i + 1 < q.node.inputs.size(); ++i) d.inputs.push_back(state);
  d.inputs.push_back(Sharding::replicated(0));  // clip scale
  d.output = Sharding::replicated(0);
  return d;
}

// Every dimension of the parameter is a parallel loop that its gradient and
// state share; the clip scale is a scalar; the op outputs nothing.
LoopNest update_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  std::vector<int> dims;
  for (int64_t d : input_shape(g, n, 0)) dims.push_back(nest.add({d}));
  for (size_t k = 0; k + 1 < n.inputs.size(); ++k) nest.inputs.push_back(dims);
  nest.inputs.push_back({});
  return nest;
}

// Sum of squares: every dimension a sum-reduction (split: partial sums).
LoopNest sum_squares_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  std::vector<int> dims;
  for (int64_t d : input_shape(g, n, 0)) dims.push_back(nest.add({d, Loop::Kind::Reduction}));
  nest.inputs.push_back(dims);
  return nest;
}

OpCost sum_squares_cost(const Node&, const CostShapes& s) {
  return {2 * elements(s.inputs[0]), 4 * elements(s.inputs[0]), false, true};
}
OpCost scalar_cost(const Node&, const CostShapes&) {
  return {10, 8, false};
}
// Adam reads the weight, gradient and both moments and writes back three.
OpCost adam_cost(const Node&, const CostShapes& s) {
  const double n = elements(s.inputs[0]);
  return {16 * n, 28 * n, false, true};
}
OpCost sgd_cost(const Node&, const CostShapes& s) {
  const double n = elements(s.inputs[0]);
  return {6 * n, 20 * n, false, true};
}

}  // namespace

void register_optimizer_ops(std::vector<OpDef>& t) {
  t[size_t(Op::SumSquares)] = {.name = "sum_squares",
                               .infer = scalar_infer,
                               .kernel = sum_squares_kernel,
                               .shard = sum_squares_rule,
                               .loops = sum_squares_loops,
                               .cost = sum_squares_cost};
  t[size_t(Op::ClipScale)] = {.name = "clip_scale",
                              .infer = scalar_infer,
                              .kernel = clip_scale_kernel,
                              .loops = broadcast_loops,
                              .cost = scalar_cost};
  t[size_t(Op::AdamUpdate)] = {.name = "adam_update",
                               .infer = update_infer,
                               .kernel = adam_kernel,
                               .side_effect = true,
                               .shard = update_rule,
                               .loops = update_loops,
                               .cost = adam_cost,
                               .mutates = 0b1101,
                               .gradient_input = 1,
                               .writes_weight = true};
  t[size_t(Op::SgdUpdate)] = {.name = "sgd_update",
                              .infer = update_infer,
                              .kernel = sgd_kernel,
                              .side_effect = true,
                              .shard = update_rule,
                              .loops = update_loops,
                              .cost = sgd_cost,
                              .mutates = 0b101,
                              .gradient_input = 1,
                              .writes_weight = true};
  t[size_t(Op::Accumulate)] = {.name = "accumulate",
                               .infer = accumulate_infer,
                               .kernel = accumulate_kernel,
                               .side_effect = true,
                               .aliases_input = true,
                               .shard = accumulate_rule,
                               .loops = broadcast_loops,
                               .linearity = Linearity::Sum,
                               .cost = accumulate_cost,
                               .mutates = 1,
                               .adds_into_input = true};
}

}  // namespace autoshard
