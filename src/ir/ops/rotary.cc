// Rotary position embedding (Su et al., RoFormer) in Hugging Face's
// rotate-half layout, as Llama, Mistral, Qwen2 and Gemma use it. A rotation
// is linear in x and its inverse is its transpose, so the gradient is the same
// op turning the other way.
#include <cmath>
#include <numbers>

#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

// inv_freq[i] = theta^(-2i/d) in f32, as PyTorch computes it, with Llama 3's
// scaling: long wavelengths slowed by `factor`, short ones kept, the band
// between blended smoothly.
void inverse_frequencies(const RotaryAttrs& a, int64_t d, std::vector<float>& inv) {
  inv.resize(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(d);
    inv[i] = 1.0f / std::pow(static_cast<float>(a.theta), exponent);
  }
  if (a.factor <= 0) return;
  const double low_wavelength = a.original_max_positions / a.low_freq_factor;
  const double high_wavelength = a.original_max_positions / a.high_freq_factor;
  for (float& f : inv) {
    const double wavelength = 2 * std::numbers::pi / f;
    if (wavelength > low_wavelength) {
      f = static_cast<float>(f / a.factor);
    } else if (wavelength >= high_wavelength) {
      const double smooth = (a.original_max_positions / wavelength - a.low_freq_factor) /
                            (a.high_freq_factor - a.low_freq_factor);
      f = static_cast<float>((1 - smooth) * f / a.factor + smooth * f);
    }
  }
}

ShapeAndType rotary_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& x = input_shape(g, n, 0);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && x.size() >= 3 && x.back() % 2 == 0,
           "rotary needs f32 [batch, time, ..., dim] with an even dim, not ", shape_str(x));
  AS_CHECK(input_dtype(g, n, 1) == DType::I32 && input_shape(g, n, 1) == Shape{x[1]},
           "rotary: positions must be i32 [", x[1], "], not ", shape_str(input_shape(g, n, 1)));
  return {x, DType::F32};
}

// y_i = x_i cos - x_{i+h} sin, y_{i+h} = x_{i+h} cos + x_i sin (h = d/2).
void rotary_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const RotaryAttrs& a = n.attr<RotaryAttrs>();
  const Shape& s = in[0]->shape();
  const int64_t batch = s[0], time = s[1], d = s.back(), half = d / 2;
  const int64_t heads = in[0]->numel() / std::max<int64_t>(batch * time * d, 1);
  thread_local std::vector<float> scratch;  // this thread's; workers read it through `inv`
  inverse_frequencies(a, d, scratch);
  const std::vector<float>& inv = scratch;
  const int32_t* pos = in[1]->i32();
  const float sign = a.inverse ? -1.0f : 1.0f;
  parallel_for(batch * time, 1, [&](int64_t r0, int64_t r1) {
    thread_local std::vector<float> cos, sin;
    cos.resize(half);
    sin.resize(half);
    for (int64_t r = r0; r < r1; ++r) {
      const float p = static_cast<float>(pos[r % time]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = p * inv[i];
        cos[i] = std::cos(angle);
        sin[i] = sign * std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        const float* x = in[0]->f32() + (r * heads + h) * d;
        float* y = out.f32() + (r * heads + h) * d;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half];
          y[i] = x1 * cos[i] - x2 * sin[i];
          y[i + half] = x2 * cos[i] + x1 * sin[i];
        }
      }
    }
  });
}

std::vector<Value> rotary_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  RotaryAttrs a = n.attr<RotaryAttrs>();
  a.inverse = !a.inverse;
  return {g.add(Op::Rotary, {dy, g.value(n.inputs[1])}, a), Value{}};
}

// Batch, time and heads are parallel; a head's pairs stay whole.
LoopNest rotary_loops(const Graph& g, const Node& n) {
  const Shape& x = input_shape(g, n, 0);
  LoopNest nest;
  std::vector<int> dims;
  for (size_t i = 0; i + 1 < x.size(); ++i) dims.push_back(nest.add({x[i]}));
  dims.push_back(nest.add({x.back(), Loop::Kind::Whole}));
  nest.inputs = {dims, {dims[1]}};
  nest.output = dims;
  return nest;
}

ShardDecision rotary_rule(const ShardQuery& q) {
  return follow_inputs(rotary_loops(q.graph, q.node), q.inputs);
}

// A cosine, a sine and six operations per pair.
OpCost rotary_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 16);
}

}  // namespace

void register_rotary_op(std::vector<OpDef>& t) {
  t[size_t(Op::Rotary)] = {.name = "rotary",
                           .infer = rotary_infer,
                           .kernel = rotary_kernel,
                           .vjp = rotary_vjp,
                           .shard = rotary_rule,
                           .loops = rotary_loops,
                           .cost = rotary_cost};
}

}  // namespace autoshard
