// The fast kernels of the Pad and Unary ops against the plain loops kept
// beside them (src/ir/ops/vision_kernels.h, unary_kernels.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "ir/ops/unary_kernels.h"
#include "ir/ops/vision_kernels.h"
#include "test_util.h"

namespace autoshard {
namespace {
using testing::evaluate;
using testing::random_tensor;

struct PadCase {
  Shape x;
  std::vector<int64_t> lo, hi;
};

TEST(KerasSpeedKernels, PadEqualsThePlainLoop) {
  const std::vector<PadCase> cases{
      {{5}, {2}, {3}},                                // 1-D pad
      {{7}, {-2}, {-1}},                              // 1-D crop
      {{3, 4, 5}, {0, 0, 0}, {0, 0, 0}},              // nothing moved: one run
      {{3, 4, 5}, {1, 0, 0}, {2, 0, 0}},              // leading dim: whole rows
      {{2, 5, 6, 3}, {0, 1, 2, 0}, {0, 1, 0, 0}},     // ZeroPadding2D-like
      {{2, 5, 6, 3}, {0, -1, 0, 0}, {0, -2, -3, 0}},  // Cropping2D-like
      {{64, 4, 12}, {-10, 0, -4}, {-53, 0, -4}},      // a time step's gate (crop of both)
      {{3, 4, 5}, {-1, 2, -2}, {1, -3, 1}},           // crop and pad mixed
      {{4, 3}, {-4, 0}, {0, 0}},                      // nothing of x lands
      {{2, 3, 4}, {0, 0, 0}, {0, 0, 2}},              // last dim only
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const PadCase& p = cases[c];
    Shape y = p.x;
    for (size_t d = 0; d < y.size(); ++d) y[d] += p.lo[d] + p.hi[d];
    const Tensor x = random_tensor(p.x, 100 + c);
    Tensor fast(y), plain(y);
    std::fill_n(fast.f32(), fast.numel(), 7.0f);  // every element must be written
    pad_forward(p.x, y, p.lo, x.f32(), fast.f32());
    pad_forward_reference(p.x, y, p.lo, x.f32(), plain.f32());
    for (int64_t e = 0; e < fast.numel(); ++e)
      ASSERT_EQ(fast.f32()[e], plain.f32()[e]) << "case " << c << " element " << e;
  }
}

TEST(KerasSpeedKernels, UnaryEqualsThePlainLoop) {
  const int64_t n = 20011;  // odd, several chunks
  Tensor x = random_tensor({n}, 3, 6.0f), dy = random_tensor({n}, 4);
  x.f32()[0] = 0.0f, x.f32()[1] = -90.0f, x.f32()[2] = 90.0f, x.f32()[3] = -17.0f;
  const double alpha = 0.3;
  for (UnaryFn fn :
       {UnaryFn::Sigmoid, UnaryFn::HardSigmoid, UnaryFn::HardSilu, UnaryFn::Relu6,
        UnaryFn::LeakyRelu, UnaryFn::Elu, UnaryFn::Selu, UnaryFn::Softplus, UnaryFn::Softsign,
        UnaryFn::Mish, UnaryFn::Exp, UnaryFn::Square, UnaryFn::Abs}) {
    std::vector<float> y(n), y_ref(n), dx(n), dx_ref(n);
    unary_forward(fn, alpha, x.f32(), y.data(), n);
    unary_forward_reference(fn, alpha, x.f32(), y_ref.data(), n);
    unary_backward(fn, alpha, x.f32(), dy.f32(), dx.data(), n);
    unary_backward_reference(fn, alpha, x.f32(), dy.f32(), dx_ref.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // Within a few float ulp of the double reference, relative to the
      // value (and 1e-30 absolute, for sigmoid's far tails).
      if (y[i] == y_ref[i] && dx[i] == dx_ref[i]) continue;  // infinities included
      EXPECT_NEAR(y[i], y_ref[i], 1e-6 * std::fabs(y_ref[i]) + 1e-30)
          << unary_name(fn) << " at x = " << x.f32()[i];
      EXPECT_NEAR(dx[i], dx_ref[i], 1e-6 * std::fabs(dx_ref[i]) + 1e-30)
          << unary_name(fn) << "' at x = " << x.f32()[i];
    }
  }
}

// A weight used by T einsums of one equation (a recurrent kernel at every
// step) gets its gradient as ONE einsum over the stacked operands, equal to
// the sum of the steps' products h_t^T c_t.
TEST(KerasSpeedKernels, StepGradientsOfAWeightAreOneStackedEinsum) {
  const int64_t T = 6, B = 2, U = 3, V = 5;
  Graph g;
  Value w = g.parameter("w", {U, V});
  std::map<std::string, Tensor> leaves{{"w", random_tensor({U, V}, 1)}};
  Value loss;
  for (int64_t t = 0; t < T; ++t) {
    const std::string h = "h" + std::to_string(t), c = "c" + std::to_string(t);
    leaves[h] = random_tensor({B, U}, 10 + t);
    leaves[c] = random_tensor({B, V}, 20 + t);
    Value term = ops::reduce_sum(
        ops::einsum("bu,uv->bv", g.input(h, {B, U}), w) * g.input(c, {B, V}), {0, 1});
    loss = t == 0 ? term : loss + term;
  }
  const Value dw = gradients(loss, {w})[0];
  ASSERT_EQ(g.node(dw.id).op, Op::Einsum);
  EXPECT_EQ(g.node(dw.id).attr<EinsumAttrs>().a.size(), 3u);  // a stacked operand
  const Tensor got = evaluate(g, leaves, {dw.id})[0];
  for (int64_t u = 0; u < U; ++u)
    for (int64_t v = 0; v < V; ++v) {
      double want = 0;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < B; ++b)
          want += double(leaves["h" + std::to_string(t)].f32()[b * U + u]) *
                  leaves["c" + std::to_string(t)].f32()[b * V + v];
      EXPECT_NEAR(got.f32()[u * V + v], want, 1e-5) << u << "," << v;
    }
}

}  // namespace
}  // namespace autoshard
