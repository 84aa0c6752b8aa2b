// Products split over the cores (ir/ops/gemm.h's parallel_blas_gemm) against
// one single-threaded BLAS call and plain loops: every transpose, uneven
// pieces, accumulation into C, several core counts. Not bit for bit: OpenBLAS
// picks its small-matrix kernels by a product's size, so a piece may take
// another kernel than the whole (as OpenBLAS's own threading changes them).
#include "ir/ops/gemm.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "autoshard/tensor/parallel.h"
#include "tensor/tile_gemm.h"

namespace autoshard {
namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// op(A) [m, k], op(B) [k, n] and C [m, n] in storage with row strides wider
// than the operands (the padding between C's rows must stay untouched).
struct Operands {
  int lda, ldb, ldc;
  std::vector<float> a, b, c0;
};
Operands operands(int m, int n, int k, bool ta, bool tb, unsigned seed) {
  Operands o{(ta ? m : k) + 3, (tb ? k : n) + 5, n + 2, {}, {}, {}};
  o.a = random_floats(size_t((ta ? k : m) * o.lda), seed);
  o.b = random_floats(size_t((tb ? n : k) * o.ldb), seed + 1);
  o.c0 = random_floats(size_t(m * o.ldc), seed + 2);
  return o;
}

TEST(ParallelBlasGemm, EqualsOneBlasCallOnAnyNumberOfCores) {
  int checked = 0;
  for (int m : {1, 17, 64, 257})
    for (int n : {1, 16, 33, 300})
      for (int k : {1, 70, 512})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            if (int64_t{m} * n * k < 4096) continue;  // the small ones never split
            const auto [lda, ldb, ldc, a, b, c0] = operands(m, n, k, ta, tb, 1);
            for (float beta : {0.0f, 1.0f}) {
              std::vector<float> want = c0;
              cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
                          tb ? CblasTrans : CblasNoTrans, m, n, k, 0.5f, a.data(), lda, b.data(),
                          ldb, beta, want.data(), ldc);
              // Plain loops: the BLAS call itself computes the product.
              for (int i = 0; i < m; i += 37)
                for (int j = 0; j < n; j += 11) {
                  double s = 0;
                  for (int p = 0; p < k; ++p)
                    s += double(ta ? a[p * lda + i] : a[i * lda + p]) *
                         (tb ? b[j * ldb + p] : b[p * ldb + j]);
                  const double expect = 0.5 * s + beta * c0[i * ldc + j];
                  ASSERT_NEAR(want[i * ldc + j], expect, 1e-4 * (1 + std::sqrt(double(k))));
                }
              for (int cores : {1, 2, 3, 4, 7}) {
                IntraOpThreadsScope scope(cores);
                std::vector<float> got = c0;
                parallel_blas_gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb, beta,
                                   got.data(), ldc);
                for (int i = 0; i < m; ++i)
                  for (int j = 0; j < ldc; ++j) {
                    const size_t at = size_t(i) * ldc + j;
                    if (j >= n)  // the padding between rows of C is left alone
                      ASSERT_EQ(got[at], c0[at]);
                    else
                      ASSERT_NEAR(got[at], want[at], 1e-5f * (1 + std::abs(want[at])))
                          << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb << " beta "
                          << beta << " on " << cores << " cores, at " << i << "," << j;
                  }
                ++checked;
              }
            }
          }
  EXPECT_GT(checked, 500);
}

// Products of few rows on tile_gemm (thin_gemm) against tile_gemm's plain
// loops on B laid out row-major: every transpose, C cut into uneven column
// pieces over several core counts, accumulation. Each element is one chain
// over the contraction however C is cut, so the bits match, except that a
// transposed B accumulates (c + alpha sum) where the loops fuse it.
TEST(ThinGemm, EqualsTileGemmsPlainLoopsOnAnyNumberOfCores) {
  if (!kTileGemmVectorised) GTEST_SKIP() << "no vector tile_gemm compiled in";
  int checked = 0;
  for (int m : {2, 7, 17, 32, 64})
    for (int n : {5, 70, 300, 600})
      for (int k : {1, 70, 129, 513})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            const auto [lda, ldb, ldc, a, b, c0] = operands(m, n, k, ta, tb, 4);
            std::vector<float> b_rows(size_t(k * n));  // op(B) row-major
            for (int p = 0; p < k; ++p)
              for (int j = 0; j < n; ++j) b_rows[p * n + j] = tb ? b[j * ldb + p] : b[p * ldb + j];
            for (float beta : {0.0f, 1.0f}) {
              std::vector<float> want = c0;
              tile_gemm_reference(m, n, k, 0.5f, a.data(), ta ? 1 : lda, ta ? lda : 1,
                                  b_rows.data(), n, beta == 1.0f, want.data(), ldc);
              for (int cores : {1, 2, 3}) {
                IntraOpThreadsScope scope(cores);
                std::vector<float> got = c0;
                const bool taken = thin_gemm(ta, tb, m, n, k, 0.5f, a.data(), lda, b.data(), ldb,
                                             beta, got.data(), ldc);
                ASSERT_EQ(taken, !tb || m >= kThinTransposedRows);
                if (!taken) continue;
                for (int i = 0; i < m; ++i)
                  for (int j = 0; j < ldc; ++j) {
                    const size_t at = size_t(i) * ldc + j;
                    if (j >= n)
                      ASSERT_EQ(got[at], c0[at]);
                    else if (tb && beta == 1.0f)
                      ASSERT_NEAR(got[at], want[at], 1e-6f * (1 + std::abs(want[at])));
                    else
                      ASSERT_EQ(got[at], want[at])
                          << m << "x" << n << "x" << k << " ta " << ta << " tb " << tb << " beta "
                          << beta << " on " << cores << " cores, at " << i << "," << j;
                  }
                ++checked;
              }
            }
          }
  // m of 2 and 7 with B transposed are left to BLAS.
  EXPECT_EQ(checked, (5 * 4 * 4 * 2 * 2 * 3) + (3 * 4 * 4 * 2 * 2 * 3));
  // Where it does not apply it leaves C alone and says so.
  std::vector<float> a(65 * 8, 1.0f), b(8 * 8, 1.0f), c(65 * 8, 7.0f);
  EXPECT_FALSE(thin_gemm(false, false, 65, 8, 8, 1, a.data(), 8, b.data(), 8, 0, c.data(), 8));
  EXPECT_FALSE(thin_gemm(false, false, 8, 8, 8, 1, a.data(), 8, b.data(), 8, 0.5f, c.data(), 8));
  EXPECT_EQ(c[0], 7.0f);
}

}  // namespace
}  // namespace autoshard
