// Row-major single-precision GEMM on int64 sizes: C = alpha op(A) op(B) +
// beta C, C being M x N and the contraction K long. BLAS takes int sizes; larger ones are
// split into blocks that fit (M and N blocks independent, K blocks summed
// into C), so no size is ever narrowed. A leading dimension above INT_MAX
// cannot be expressed to BLAS and is an error. A single row of C runs as a
// matrix-vector product (ir/ops/quantized_gemv.h; OpenBLAS 0.3.21's GEMM
// packs B first: twice the traffic of a decode step's weights). A one-row
// (or one-column) product handed the bf16 or int8 copy of its weight (by
// QuantizedEinsum's kernel, the one op whose graph says its weight is held
// so) reads that compact copy instead. Larger products are split over the calling thread's
// cores (parallel_blas_gemm), each piece on one OpenBLAS thread; products of
// few rows run on tile_gemm instead (thin_gemm).
#pragma once

#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "autoshard/error.h"
#include "ir/ops/quantized_gemv.h"

namespace autoshard {

// C = alpha op(A) op(B) + beta C for sizes BLAS takes: pieces of C's rows or
// columns on the calling thread's cores (intra_op_threads()), each a
// single-threaded OpenBLAS call. OpenBLAS's own threads would share the cores
// with autoshard's pool, whose workers keep spinning for a while after each
// elementwise kernel; on 2 cores GPT-2's step ran 7-10% faster this way. Only
// rows or columns are divided, never the contraction; a piece may still differ
// from the whole in the last bits, as OpenBLAS picks its small-matrix kernels
// by size (and did by its own thread count before).
void parallel_blas_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                        int ldc);

// C = alpha op(A) op(B) + beta C for a product of at most kThinRows rows of
// C and a contraction of at most kThinDepth (an LSTM step's [32, 512] x
// [512, 2048] and its gradient), on tile_gemm (tensor/tile_gemm.h), pieces
// of C's columns on the calling thread's cores. OpenBLAS 0.3.21 packs B into
// panels on every call, which at 32 rows costs about what the product does;
// tile_gemm reads B where it lies and ran 1.7-2.3x OpenBLAS's rate on these
// shapes (docs/performance.md, "Products of few rows"). Returns false, doing
// nothing, where it does not apply: more rows or a deeper contraction, fewer
// than kThinTransposedRows rows with B transposed, a beta other than 0 or 1,
// or no vector kernel compiled in. Each element of C is tile_gemm's one
// chain over the contraction, however C is cut.
constexpr int64_t kThinRows = 64, kThinDepth = 4096, kThinTransposedRows = 16;
bool thin_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc);

// The compact copies of A and B as whole matrices, handed by the caller
// (QuantizedEinsum), or null: a one-row product reads B's, a one-column
// product A's, when the copy has the product's shape.
struct CompactOperands {
  const QuantizedMatrix* a = nullptr;
  const QuantizedMatrix* b = nullptr;
};

inline void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                  int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc,
                  float alpha = 1.0f, float beta = 0.0f, int64_t max_dim = INT_MAX,
                  CompactOperands compact = {}) {
  AS_CHECK(lda <= INT_MAX && ldb <= INT_MAX && ldc <= INT_MAX, "a matrix row of more than ",
           INT_MAX, " elements is beyond BLAS's int sizes (lda ", lda, ", ldb ", ldb, ", ldc ", ldc,
           ")");
  for (int64_t i0 = 0; i0 < M; i0 += max_dim)
    for (int64_t j0 = 0; j0 < N; j0 += max_dim)
      for (int64_t k0 = 0; k0 < std::max<int64_t>(K, 1); k0 += max_dim) {
        const int64_t m = std::min(max_dim, M - i0), n = std::min(max_dim, N - j0);
        const int64_t k = std::min(max_dim, K - k0);
        const float* a = trans_a ? A + k0 * lda + i0 : A + i0 * lda + k0;
        const float* b = trans_b ? B + j0 * ldb + k0 : B + k0 * ldb + j0;
        const float c_beta = k0 == 0 ? beta : 1.0f;
        // A block of a matrix is that matrix's copy only when it is the whole.
        const QuantizedMatrix* qa = i0 == 0 && k0 == 0 ? compact.a : nullptr;
        const QuantizedMatrix* qb = j0 == 0 && k0 == 0 ? compact.b : nullptr;
        // One row (a decode step): a matrix-vector product reads B once. (Empty
        // blocks stay with GEMM: BLAS rejects GEMV's zero leading dimensions.)
        if (m == 1 && n > 0 && k > 0 && ldb > 0 && lda > 0) {
          // C[1, n] = a op(B): B is [n, k] when transposed, else [k, n].
          if (quantized_gemv_if_fits(qb, trans_b, n, k, ldb, a, trans_a ? lda : 1, alpha, c_beta,
                                     C + i0 * ldc + j0, 1))
            continue;
          f32_gemv(trans_b, n, k, b, ldb, a, trans_a ? lda : 1, alpha, c_beta, C + i0 * ldc + j0,
                   1);
          continue;
        }
        // C[m, 1] = op(A) b over a compact weight A (the einsum kernel
        // computing C^T): A is [k, m] when transposed, else [m, k].
        if (n == 1 && m > 1 && k > 0 &&
            quantized_gemv_if_fits(qa, !trans_a, m, k, lda, b, trans_b ? 1 : ldb, alpha, c_beta,
                                   C + i0 * ldc + j0, ldc))
          continue;
        if (thin_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, c_beta, C + i0 * ldc + j0,
                      ldc))
          continue;
        parallel_blas_gemm(trans_a, trans_b, static_cast<int>(m), static_cast<int>(n),
                           static_cast<int>(k), alpha, a, static_cast<int>(lda), b,
                           static_cast<int>(ldb), c_beta, C + i0 * ldc + j0, static_cast<int>(ldc));
      }
}

}  // namespace autoshard
