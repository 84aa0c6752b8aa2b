// The attention's tile products (tensor/tile_gemm.h) against their plain
// loops, bit for bit: every block shape the edges of a tile need, both
// layouts of A, with and without accumulation; and the 16-float vector
// helpers (tensor/vec16.h) against scalar code.
#include "tensor/tile_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/fast_math.h"
#include "tensor/vec16.h"

namespace autoshard {
namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(TileGemm, MatchesThePlainLoopsBitForBit) {
  if (!kTileGemmVectorised)
    GTEST_SKIP() << "built without AVX-512 or AVX2: tile_gemm is the plain loops";
  int checked = 0;
  for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 17, 32, 64})
    for (int64_t n : {1, 5, 15, 16, 17, 31, 32, 33, 48, 64, 70})
      for (int64_t k : {0, 1, 13, 64})
        for (bool transposed : {false, true})
          for (bool accumulate : {false, true}) {
            // Row strides wider than the operands, as the attention's are;
            // B and C end exactly where their last element does (a read past
            // a tile's last column would leave the buffer).
            const int64_t lda = (transposed ? m : k) + 3, ldb = n + 5, ldc = n + 2;
            const std::vector<float> a = random_floats((transposed ? k : m) * lda + 1, 1);
            std::vector<float> b = random_floats(k == 0 ? 1 : (k - 1) * ldb + n, 2);
            std::vector<float> fast = random_floats((m - 1) * ldc + n, 3), plain = fast;
            const int64_t a_row = transposed ? 1 : lda, a_col = transposed ? lda : 1;
            tile_gemm(m, n, k, 0.7f, a.data(), a_row, a_col, b.data(), ldb, accumulate, fast.data(),
                      ldc);
            tile_gemm_reference(m, n, k, 0.7f, a.data(), a_row, a_col, b.data(), ldb, accumulate,
                                plain.data(), ldc);
            ASSERT_EQ(0, std::memcmp(fast.data(), plain.data(), fast.size() * sizeof(float)))
                << "m " << m << " n " << n << " k " << k << " transposed " << transposed
                << " accumulate " << accumulate;
            ++checked;
          }
  EXPECT_EQ(checked, 12 * 11 * 4 * 4);
}

TEST(TileGemm, IsTheProductItSaysItIs) {
  // C = 2 A B + C on integers, exact in floats: the reference itself checked.
  const float a[] = {1, 2, 3, 4, 5, 6};           // 2 x 3
  const float b[] = {1, 0, 2, 0, 1, 1, 1, 1, 0};  // 3 x 3
  float c[] = {1, 1, 1, 1, 1, 1};
  tile_gemm(2, 3, 3, 2.0f, a, 3, 1, b, 3, true, c, 3);
  const float want[] = {1 + 2 * 4, 1 + 2 * 5, 1 + 2 * 4, 1 + 2 * 10, 1 + 2 * 11, 1 + 2 * 13};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], want[i]) << i;
}

TEST(Vec16, ReductionsAndExpMatchScalarCode) {
  const std::vector<float> x = random_floats(16, 4);
  const f32x16 v = load16(x.data());
  float mx = -INFINITY, sum = 0;
  for (float e : x) mx = std::max(mx, e);
  EXPECT_EQ(max16(v), mx);
  for (float e : x) sum += e;
  EXPECT_NEAR(sum16(v), sum, 1e-5);
  // Each lane of the vector exp is the scalar call's bits.
  float lanes[16];
  store16(lanes, fast_exp(v * 20.0f));
  for (int i = 0; i < 16; ++i) EXPECT_EQ(lanes[i], fast_exp(x[i] * 20.0f)) << i;
  // A NaN in any lane makes the maximum NaN, wherever it sits.
  for (int at = 0; at < 16; ++at) {
    std::vector<float> y = x;
    y[at] = NAN;
    EXPECT_TRUE(std::isnan(max16(load16(y.data())))) << at;
  }
}

}  // namespace
}  // namespace autoshard
