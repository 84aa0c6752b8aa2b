// The GEMM of each library on the shapes of the GPT-2 124M step (B=4, T=64: 256 rows;
// the 50257-wide LM head; weight gradients with 256 summed; attention
// tiles) and two squares, for choosing the GEMM library by measurement.
// bench/gemm_libraries.sh builds it once per library and runs each: the
// BLAS libraries through cblas_sgemm, oneDNN through dnnl_sgemm
// (-DGEMM_DNNL) and libxsmm through its threaded libxsmm_sgemm_omp
// (-DGEMM_XSMM).
#if defined(GEMM_DNNL)
#include <oneapi/dnnl/dnnl.h>
#elif defined(GEMM_XSMM)
#include <libxsmm.h>
#else
#include <cblas.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

namespace {

// Row-major C[m,n] = A[m,k] B[k,n] (B stored [n,k] when b_transposed).
void sgemm(int m, int n, int k, bool b_transposed, const float* a, const float* b, float* c) {
  const int ldb = b_transposed ? k : n;
#if defined(GEMM_DNNL)
  dnnl_sgemm('N', b_transposed ? 'T' : 'N', m, n, k, 1.0f, a, k, b, ldb, 0.0f, c, n);
#elif defined(GEMM_XSMM)
  // Column-major library: C^T[n,m] = B^T A^T, so the operands swap.
  const char ta = b_transposed ? 'T' : 'N', tb = 'N';
  const float alpha = 1.0f, beta = 0.0f;
  const int lda = k;
  libxsmm_sgemm_omp(&ta, &tb, &n, &m, &k, &alpha, b, &ldb, a, &lda, &beta, c, &n);
#else
  cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, m, n, k, 1.0f,
              a, k, b, ldb, 0.0f, c, n);
#endif
}

// The adapter against a plain triple loop on varied data: a swapped operand
// or transpose would time the wrong product.
bool agrees_with_loops(int m, int n, int k, bool b_transposed) {
  std::vector<float> a(size_t(m) * k), b(size_t(k) * n), c(size_t(m) * n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(i % 7) - 3;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(i % 5) - 2;
  sgemm(m, n, k, b_transposed, a.data(), b.data(), c.data());
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float want = 0;
      for (int p = 0; p < k; ++p)
        want += a[size_t(i) * k + p] * (b_transposed ? b[size_t(j) * k + p] : b[size_t(p) * n + j]);
      if (std::abs(c[size_t(i) * n + j] - want) > 1e-3f * (1 + std::abs(want))) return false;
    }
  return true;
}

// Best of 5 timed calls after one warm-up, in GFLOP/s.
double gflops(int m, int n, int k, bool b_transposed) {
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  double best = 0;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    sgemm(m, n, k, b_transposed, a.data(), b.data(), c.data());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * m * n * double(k) / s * 1e-9);
  }
  return best;
}

}  // namespace

int main() {
  if (!agrees_with_loops(5, 7, 3, false) || !agrees_with_loops(5, 7, 3, true)) {
    std::fprintf(stderr, "this library's product disagrees with the plain loops\n");
    return 1;
  }
  struct Shape {
    int m, n, k;
    bool bt;
  };
  const Shape shapes[] = {{1024, 1024, 1024, false}, {2048, 2048, 2048, false},
                          {256, 3072, 768, false},   {256, 768, 3072, false},
                          {256, 2304, 768, false},   {256, 50257, 768, true},
                          {768, 3072, 256, false},   {32, 64, 64, true}};
  for (const Shape& s : shapes)
    std::printf("%5d x %5d x %5d%s %8.1f GFLOP/s\n", s.m, s.n, s.k, s.bt ? " (B^T)" : "      ",
                gflops(s.m, s.n, s.k, s.bt));
}
