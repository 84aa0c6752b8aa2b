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

namespace autoshard {
namespace {

std::vector<float> random_floats(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(ParallelBlasGemm, EqualsOneBlasCallOnAnyNumberOfCores) {
  int checked = 0;
  for (int m : {1, 17, 64, 257})
    for (int n : {1, 16, 33, 300})
      for (int k : {1, 70, 512})
        for (bool ta : {false, true})
          for (bool tb : {false, true}) {
            if (int64_t{m} * n * k < 4096) continue;  // the small ones never split
            // Row strides wider than the operands.
            const int lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
            const auto a = random_floats(size_t((ta ? k : m) * lda), 1);
            const auto b = random_floats(size_t((tb ? n : k) * ldb), 2);
            const auto c0 = random_floats(size_t(m * ldc), 3);
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

}  // namespace
}  // namespace autoshard
