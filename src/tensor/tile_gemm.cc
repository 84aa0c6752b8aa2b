#include "tensor/tile_gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace autoshard {

void tile_gemm_reference(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                         int64_t a_row, int64_t a_col, const float* b, int64_t ldb, bool accumulate,
                         float* c, int64_t ldc) {
  // p outside j (each element's chain still runs over p in order): the
  // loop over a row of B vectorises.
  constexpr int64_t kChunk = 64;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
      const int64_t width = std::min(kChunk, n - j0);
      float sum[kChunk] = {};
      for (int64_t p = 0; p < k; ++p) {
        const float x = a[i * a_row + p * a_col];
        const float* bp = b + p * ldb + j0;
        for (int64_t j = 0; j < width; ++j) sum[j] = std::fma(x, bp[j], sum[j]);
      }
      float* out = c + i * ldc + j0;
      for (int64_t j = 0; j < width; ++j)
        out[j] = accumulate ? std::fma(alpha, sum[j], out[j]) : alpha * sum[j];
    }
}

#if defined(__AVX512F__)
namespace {

constexpr int kRows = 8;     // rows of C a block keeps in registers
constexpr int kVectors = 2;  // 16-float vectors per row: 32 columns
constexpr int kWidth = 16 * kVectors;

// C[rows x (16 (vectors - 1) + popcount(tail))] from its k-long chains: 16
// accumulators at most, leaving registers for B's row and A's broadcast.
template <int rows, int vectors>
void block(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
           int64_t ldb, bool accumulate, float* c, int64_t ldc, __mmask16 tail) {
  // Every loop over rows and vectors is unrolled so that acc stays in
  // registers (left as loops, GCC kept it on the stack: 40% of the speed).
  __m512 acc[rows][vectors];
#pragma GCC unroll 8
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < vectors; ++v) acc[r][v] = _mm512_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    __m512 bv[vectors];
#pragma GCC unroll 8
    for (int v = 0; v + 1 < vectors; ++v) bv[v] = _mm512_loadu_ps(bp + 16 * v);
    // Masked lanes are not read: a tile's last columns may end its buffer.
    bv[vectors - 1] = _mm512_maskz_loadu_ps(tail, bp + 16 * (vectors - 1));
    const float* ap = a + p * a_col;
#pragma GCC unroll 8
    for (int r = 0; r < rows; ++r) {
      const __m512 av = _mm512_set1_ps(ap[r * a_row]);
#pragma GCC unroll 8
      for (int v = 0; v < vectors; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < vectors; ++v) {
      const __mmask16 lanes = v + 1 < vectors ? __mmask16(0xFFFF) : tail;
      float* cr = c + r * ldc + 16 * v;
      const __m512 out = accumulate
                             ? _mm512_fmadd_ps(scale, acc[r][v], _mm512_maskz_loadu_ps(lanes, cr))
                             : _mm512_mul_ps(scale, acc[r][v]);
      _mm512_mask_storeu_ps(cr, lanes, out);
    }
}

using Block = void (*)(int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, bool,
                       float*, int64_t, __mmask16);

// blocks[rows - 1][vectors - 1]: every block shape a tile's edges need.
template <int... rows>
constexpr std::array<std::array<Block, kVectors>, kRows> block_table(
    std::integer_sequence<int, rows...>) {
  return {std::array<Block, kVectors>{block<rows + 1, 1>, block<rows + 1, 2>}...};
}
constexpr auto kBlocks = block_table(std::make_integer_sequence<int, kRows>{});

}  // namespace

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kWidth) {
      const int64_t cols = std::min<int64_t>(kWidth, n - j0);
      const int64_t vectors = (cols + 15) / 16, last = cols - 16 * (vectors - 1);
      const auto tail = static_cast<__mmask16>((1u << last) - 1);
      kBlocks[rows - 1][vectors - 1](k, alpha, a + i0 * a_row, a_row, a_col, b + j0, ldb,
                                     accumulate, c + i0 * ldc + j0, ldc, tail);
    }
  }
}

#else  // no AVX-512 compiled in: the plain loops

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  tile_gemm_reference(m, n, k, alpha, a, a_row, a_col, b, ldb, accumulate, c, ldc);
}

#endif

}  // namespace autoshard
