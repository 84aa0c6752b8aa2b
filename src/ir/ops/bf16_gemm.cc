#include "ir/ops/bf16_gemm.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "autoshard/tensor/parallel.h"
#include "ir/ops/gemm.h"
#include "tensor/quantize.h"

namespace autoshard {
namespace {

// Panels start at multiples of this many rows or columns (BLAS's register
// blocks), at least one block wide.
constexpr int64_t kPanelAlign = 16;

// Rows (or columns) of op(X) per panel, for panels `depth` elements deep.
int64_t panel_length(int64_t length, int64_t depth) {
  const int64_t fit = kPanelBytes / (4 * std::max<int64_t>(depth, 1));
  return std::min(length, std::max(kPanelAlign, fit / kPanelAlign * kPanelAlign));
}

// A panel's f32 storage (0: op(A)'s, 1: op(B)'s), kept by the calling
// thread between products (a device's kernels run on its own thread), so a
// step's products do not ask the allocator for megabytes each time.
float* panel_scratch(int which, int64_t elements) {
  thread_local std::vector<float> scratch[2];
  std::vector<float>& s = scratch[which];
  if (int64_t(s.size()) < elements) s.resize(size_t(elements));
  return s.data();
}

// The whole bf16 matrix `x` (storage rows x cols), widened into `buf`.
GemmOperand widen_whole(const GemmOperand& x, int64_t rows, int64_t cols, std::vector<float>& buf) {
  if (x.bf16 == nullptr) return x;
  buf.resize(size_t(std::max<int64_t>(rows * cols, 1)));
  widen_block(x.bf16, x.ld, 0, rows, 0, cols, buf.data());
  return {buf.data(), nullptr, std::max<int64_t>(cols, 1), x.trans};
}

// op(X)'s rows [i0, i0 + m) (K deep) of a bf16 operand, widened into `buf`
// as an f32 operand in the same orientation.
GemmOperand widen_rows(const GemmOperand& x, int64_t i0, int64_t m, int64_t K, float* buf) {
  if (!x.trans) {  // storage [rows, K]
    widen_block(x.bf16, x.ld, i0, i0 + m, 0, K, buf);
    return {buf, nullptr, std::max<int64_t>(K, 1), false};
  }
  widen_block(x.bf16, x.ld, 0, K, i0, i0 + m, buf);  // storage [K, rows]
  return {buf, nullptr, std::max<int64_t>(m, 1), true};
}

// op(X)'s columns [j0, j0 + n) (K deep) of a bf16 operand, widened.
GemmOperand widen_columns(const GemmOperand& x, int64_t j0, int64_t n, int64_t K, float* buf) {
  if (!x.trans) {  // storage [K, columns]
    widen_block(x.bf16, x.ld, 0, K, j0, j0 + n, buf);
    return {buf, nullptr, std::max<int64_t>(n, 1), false};
  }
  widen_block(x.bf16, x.ld, j0, j0 + n, 0, K, buf);  // storage [columns, K]
  return {buf, nullptr, std::max<int64_t>(K, 1), true};
}

void f32_product(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b,
                 float* c, int64_t ldc, float beta) {
  sgemm(a.trans, b.trans, M, N, K, a.f32, a.ld, b.f32, b.ld, c, ldc, 1.0f, beta);
}

}  // namespace

void widen_block(const uint16_t* src, int64_t ld, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                 float* dst) {
  const int64_t width = c1 - c0;
  if (width <= 0 || r1 <= r0) return;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / width);
  parallel_for(r1 - r0, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const uint16_t* s = src + (r0 + r) * ld + c0;
      float* d = dst + r * width;
      for (int64_t j = 0; j < width; ++j) d[j] = bf16_widen(s[j]);
    }
  });
}

void gemm_widening(int64_t M, int64_t N, int64_t K, const GemmOperand& a, const GemmOperand& b,
                   float* c, int64_t ldc, float beta) {
  if (M <= 0 || N <= 0) return;
  if (a.bf16 != nullptr) {
    // Bands of C's rows, each from a widened band of op(A)'s rows (B, if
    // bf16 too, is widened in bands under each).
    const int64_t p = panel_length(M, K);
    float* buf = panel_scratch(0, p * std::max<int64_t>(K, 1));
    for (int64_t i0 = 0; i0 < M; i0 += p) {
      const int64_t m = std::min(p, M - i0);
      gemm_widening(m, N, K, widen_rows(a, i0, m, K, buf), b, c + i0 * ldc, ldc, beta);
    }
    return;
  }
  if (b.bf16 == nullptr) return f32_product(M, N, K, a, b, c, ldc, beta);
  const int64_t p = panel_length(N, K);
  float* buf = panel_scratch(1, p * std::max<int64_t>(K, 1));
  for (int64_t j0 = 0; j0 < N; j0 += p) {
    const int64_t n = std::min(p, N - j0);
    f32_product(M, n, K, a, widen_columns(b, j0, n, K, buf), c + j0, ldc, beta);
  }
}

void gemm_widening_reference(int64_t M, int64_t N, int64_t K, const GemmOperand& a,
                             const GemmOperand& b, float* c, int64_t ldc, float beta) {
  if (M <= 0 || N <= 0) return;
  std::vector<float> wa, wb;
  // op(A) is [M, K] and op(B) [K, N]; their storage is transposed when read so.
  const GemmOperand fa = widen_whole(a, a.trans ? K : M, a.trans ? M : K, wa);
  const GemmOperand fb = widen_whole(b, b.trans ? N : K, b.trans ? K : N, wb);
  f32_product(M, N, K, fa, fb, c, ldc, beta);
}

}  // namespace autoshard
