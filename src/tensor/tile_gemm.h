// Products of small tiles that live in the L1 cache: the fused attention's
// 32 x 64 score and gradient tiles. BLAS is the wrong tool there: OpenBLAS
// 0.3.21 packs both operands on every call (a third of the time on a 32 x 64
// x 64 product) and threads a product above 64^3 itself, on cores the
// attention's heads already occupy. This kernel keeps a block of C in
// registers (8 x 32 with AVX-512, 6 x 16 with AVX2) and reads A and B where
// they lie.
//
//   C (m x n, rows ldc apart) = alpha * A B            (accumulate false)
//   C                         = alpha * A B + C        (accumulate true)
//
// A (m x k) is read as A(i, p) = a[i * a_row + p * a_col]: a row-major A is
// (a_row = lda, a_col = 1), a transposed one (a_row = 1, a_col = lda). B
// (k x n) is row-major, B(p, j) = b[p * ldb + j]: a product with B^T needs
// B packed transposed first (the attention packs each head's keys once).
//
// Every element of C is one fused multiply-add chain over p = 0..k-1 in
// order, then one multiply by alpha (or one fused alpha * sum + C), so the
// vector kernel and tile_gemm_reference give the same bits.
#pragma once

#include <cstdint>

namespace autoshard {

// Whether tile_gemm is the vectorised kernel (AVX-512, or AVX2 with FMA,
// compiled in) rather than its plain loops: callers with a faster fallback
// (BLAS) use it only then.
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
constexpr bool kTileGemmVectorised = true;
#else
constexpr bool kTileGemmVectorised = false;
#endif

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc);

// The plain loops tile_gemm is tested against (and runs where neither
// vector kernel is compiled in).
void tile_gemm_reference(int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                         int64_t a_row, int64_t a_col, const float* b, int64_t ldb, bool accumulate,
                         float* c, int64_t ldc);

}  // namespace autoshard
