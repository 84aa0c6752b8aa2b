// cblas_sgemm on the shapes of the GPT-2 124M step (B=4, T=64: 256 rows;
// the 50257-wide LM head; weight gradients with 256 summed; attention
// tiles) and two squares, for choosing the GEMM library by measurement.
// bench/gemm_libraries.sh builds it once per library and runs each.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace {

// Best of 5 timed calls after one warm-up, in GFLOP/s.
double gflops(int m, int n, int k, bool b_transposed) {
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f), c(size_t(m) * n);
  double best = 0;
  for (int r = 0; r < 6; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, m, n, k,
                1.0f, a.data(), k, b.data(), b_transposed ? k : n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * m * n * double(k) / s * 1e-9);
  }
  return best;
}

}  // namespace

int main() {
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
