// Resize: one dimension of an image resampled to another extent, the way
// tf.image.resize and jax.image.resize do without antialiasing (Keras 3's
// Resizing, keras/src/layers/preprocessing/image_preprocessing/resizing.py,
// calls them through keras.ops.image.resize): half-pixel centres, output
// position o reads the input at src = (o + 0.5) * in / out - 0.5. Bilinear
// mixes the rows floor(src) and floor(src) + 1 (clamped to the image);
// nearest reads row floor((o + 0.5) * in / out). A resize is linear in its
// input, so its gradient is the transposed map (the same op, `adjoint`).
#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

// Output position o is (1 - w) * x[lo] + w * x[hi].
struct Tap {
  int64_t lo = 0, hi = 0;
  float w = 0;
};

std::vector<Tap> resize_taps(int64_t in, int64_t out, bool nearest) {
  std::vector<Tap> taps(out);
  const double scale = double(in) / double(out);
  for (int64_t o = 0; o < out; ++o) {
    if (nearest) {
      const auto i = static_cast<int64_t>(std::floor((double(o) + 0.5) * scale));
      taps[o].lo = taps[o].hi = std::min(i, in - 1);
      continue;
    }
    const double src = (double(o) + 0.5) * scale - 0.5;
    const double low = std::floor(src);
    taps[o].lo = std::clamp<int64_t>(static_cast<int64_t>(low), 0, in - 1);
    taps[o].hi = std::clamp<int64_t>(static_cast<int64_t>(low) + 1, 0, in - 1);
    taps[o].w = static_cast<float>(src - low);
  }
  return taps;
}

ShapeAndType resize_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const ResizeAttrs& a = n.attr<ResizeAttrs>();
  Shape s = input_shape(g, n, 0);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32, "resize: needs an f32 input");
  AS_CHECK(a.dim >= 0 && a.dim < static_cast<int>(s.size()), "resize: dim ", a.dim,
           " is not a dim of ", shape_str(s));
  AS_CHECK(a.size >= 1 && s[a.dim] >= 1, "resize: cannot resize dim ", a.dim, " of ", shape_str(s),
           " to ", a.size);
  s[a.dim] = a.size;
  return {s, DType::F32};
}

// The extents around `dim`: rows of `inner` contiguous elements, `outer` blocks.
struct Around {
  int64_t outer = 1, inner = 1;
};
Around around(const Shape& s, int dim) {
  Around r;
  for (int d = 0; d < dim; ++d) r.outer *= s[d];
  for (size_t d = dim + 1; d < s.size(); ++d) r.inner *= s[d];
  return r;
}

void resize_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const ResizeAttrs& a = n.attr<ResizeAttrs>();
  const Tensor& x = *in[0];
  const int64_t from = x.shape()[a.dim], to = a.size;
  const Around r = around(x.shape(), a.dim);
  const float* src = x.f32();
  float* dst = out.f32();
  if (!a.adjoint) {
    const std::vector<Tap> taps = resize_taps(from, to, a.nearest);
    for (int64_t b = 0; b < r.outer; ++b)
      for (int64_t o = 0; o < to; ++o) {
        const float* lo = src + (b * from + taps[o].lo) * r.inner;
        const float* hi = src + (b * from + taps[o].hi) * r.inner;
        float* y = dst + (b * to + o) * r.inner;
        const float w = taps[o].w;
        for (int64_t k = 0; k < r.inner; ++k) y[k] = lo[k] + w * (hi[k] - lo[k]);
      }
    return;
  }
  // The transpose: each output position of the forward map hands its
  // gradient back to its two taps.
  const std::vector<Tap> taps = resize_taps(to, from, a.nearest);
  std::fill_n(dst, out.numel(), 0.0f);
  for (int64_t b = 0; b < r.outer; ++b)
    for (int64_t o = 0; o < from; ++o) {
      const float* dy = src + (b * from + o) * r.inner;
      float* lo = dst + (b * to + taps[o].lo) * r.inner;
      float* hi = dst + (b * to + taps[o].hi) * r.inner;
      const float w = taps[o].w;
      for (int64_t k = 0; k < r.inner; ++k) {
        lo[k] += (1 - w) * dy[k];
        hi[k] += w * dy[k];
      }
    }
}

std::vector<Value> resize_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  ResizeAttrs back = n.attr<ResizeAttrs>();
  back.size = input_shape(g, n, 0)[back.dim];
  back.adjoint = !back.adjoint;
  return {g.add(Op::Resize, {dy}, back)};
}

// The resized dim stays whole (its positions read across the input); the
// others split freely.
LoopNest resize_loops(const Graph& g, const Node& n) {
  const int dim = n.attr<ResizeAttrs>().dim;
  const Shape& x = input_shape(g, n, 0);
  LoopNest nest;
  std::vector<int> in;
  for (size_t d = 0; d < x.size(); ++d) {
    const bool moved = static_cast<int>(d) == dim;
    const int l = nest.add({n.shape[d], moved ? Loop::Kind::Whole : Loop::Kind::Parallel});
    nest.output.push_back(l);
    in.push_back(moved ? -1 : l);
  }
  nest.inputs = {in};
  return nest;
}

ShardDecision resize_rule(const ShardQuery& q) {
  return follow_inputs(resize_loops(q.graph, q.node), q.inputs);
}

// Two taps per element: a subtraction and a multiply-add.
OpCost resize_cost(const Node& n, const CostShapes& s) {
  return streaming_cost(s, n.attr<ResizeAttrs>().nearest ? 0 : 3);
}

}  // namespace

void register_resize_op(std::vector<OpDef>& t) {
  t[size_t(Op::Resize)] = {.name = "resize",
                           .infer = resize_infer,
                           .kernel = resize_kernel,
                           .vjp = resize_vjp,
                           .shard = resize_rule,
                           .loops = resize_loops,
                           .linearity = Linearity::Unary,
                           .cost = resize_cost};
}

namespace ops {

Value resize(Value x, int dim, int64_t size, bool nearest) {
  return x.graph->add(Op::Resize, {x}, ResizeAttrs{dim, size, nearest, false});
}

}  // namespace ops
}  // namespace autoshard
