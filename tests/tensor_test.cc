// Tensors: typed access is checked, sizes never wrap, and the vectorised
// exp/tanh keep the accuracy their header promises against libm.
#include "autoshard/tensor/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "autoshard/error.h"
#include "tensor/fast_math.h"

namespace autoshard {
namespace {

TEST(Tensor, TypedAccessChecksTheDtype) {
  Tensor ids({3}, DType::I32);
  EXPECT_NO_THROW(ids.i32());
  EXPECT_THROW(ids.f32(), Error);
  Tensor x({2});
  EXPECT_THROW(x.i32(), Error);
  EXPECT_THROW(x.data<int32_t>(), Error);
  EXPECT_NO_THROW(x.data<float>());
}

TEST(Tensor, SizesThatWouldWrapAreErrors) {
  EXPECT_THROW(numel({int64_t{1} << 40, int64_t{1} << 40}), Error);
  EXPECT_THROW(numel({4, -1}), Error);
  EXPECT_EQ(numel({int64_t{1} << 30, 1 << 30}), int64_t{1} << 60);
  EXPECT_THROW(numel({int64_t{1} << 31, int64_t{1} << 30}), Error);
  EXPECT_THROW(Tensor({int64_t{1} << 40, int64_t{1} << 40}), Error);
  try {
    Tensor huge({int64_t{1} << 50});  // 4 PiB: the allocation fails, clearly
    FAIL() << "allocated 4 PiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory"), std::string::npos) << e.what();
  }
}

// Distance in units in the last place between two finite floats.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  if (ia < 0) ia = INT32_MIN - ia;
  if (ib < 0) ib = INT32_MIN - ib;
  return std::llabs(int64_t{ia} - int64_t{ib});
}

TEST(FastMath, ExpWithinTwoUlpOfLibm) {
  int64_t worst = 0;
  float at = 0;
  // Every 97th float bit pattern in [-87, 88]: millions of points.
  for (float x = -87.0f; x < 88.0f;) {
    const float want = std::exp(x);
    const int64_t u = ulps(fast_exp(x), want);
    if (u > worst) worst = u, at = x;
    int32_t bits;
    std::memcpy(&bits, &x, 4);
    bits += x < 0 ? -97 : 97;
    if (x < 0 && bits < 0x00800000) bits = 0;  // crossed zero from below
    std::memcpy(&x, &bits, 4);
    if (x > -1e-30f && x < 0) x = 0;
  }
  EXPECT_LE(worst, 2) << "at x = " << at;
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_GT(fast_exp(-200.0f), 0.0f);  // clamped, never a garbage exponent
  EXPECT_TRUE(std::isfinite(fast_exp(200.0f)));
  // NaN stays NaN (a finite value would hide a diverged model).
  EXPECT_TRUE(std::isnan(fast_exp(NAN)));
  EXPECT_TRUE(std::isnan(fast_tanh(NAN)));
}

TEST(FastMath, TanhWithinItsStatedAbsoluteError) {
  double worst = 0;
  for (int i = -200000; i <= 200000; ++i) {
    const float x = static_cast<float>(i) * 5e-5f;  // [-10, 10]
    worst = std::max(worst, std::fabs(double(fast_tanh(x)) - std::tanh(double(x))));
  }
  EXPECT_LT(worst, 2e-7);
}

}  // namespace
}  // namespace autoshard
