#include "ir/ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "autoshard/ir/blas_core.h"
#include "autoshard/tensor/parallel.h"
#include "tensor/tile_gemm.h"
#include "tensor/transpose.h"

namespace autoshard {
namespace {

// Below this many multiply-adds a product stays on the calling thread
// (OpenBLAS's own threshold for threading: about 5 us on one core).
constexpr int64_t kSplitWork = int64_t{1} << 18;
// Pieces start at multiples of this many rows or columns: whole register
// blocks of OpenBLAS's AVX-512 and AVX2 kernels.
constexpr int64_t kAlign = 16;

void one_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
              const float* b, int ldb, float beta, float* c, int ldc) {
  blas::sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Rows or columns per piece when `length` is cut into `parts`, rounded up to kAlign.
int64_t piece_length(int64_t length, int64_t parts) {
  const int64_t even = (length + parts - 1) / parts;
  return std::min(length, (even + kAlign - 1) / kAlign * kAlign);
}

// The grid of pieces (row parts x column parts, their product at most
// `threads`) whose pieces are closest to square: each piece packs its rows
// of A and its columns of B, so squarer pieces pack less in all.
std::pair<int64_t, int64_t> grid(int64_t m, int64_t n, int threads) {
  std::pair<int64_t, int64_t> best{1, 1};
  double best_packed = -1;
  for (int64_t rows = 1; rows <= threads; ++rows) {
    const int64_t cols = threads / rows;
    const int64_t rm = piece_length(m, rows), cn = piece_length(n, cols);
    if ((m + rm - 1) / rm * ((n + cn - 1) / cn) < 2) continue;  // nothing split
    const double packed = double(rows) * n + double(cols) * m;
    if (best_packed < 0 || packed < best_packed) best = {rows, cols}, best_packed = packed;
  }
  return best;
}

// Calls piece(j0, width) on [0, n) over the calling thread's cores: pieces
// of whole blocks, at most `widest` long, and short enough that every core
// gets one. Each element's chain is the same however C is cut, so the
// pieces do not change the bits.
template <typename Piece>
void over_pieces(int64_t n, int64_t block, int64_t widest, const Piece& piece) {
  const int64_t even = (n + intra_op_threads() - 1) / intra_op_threads();
  const int64_t width = std::clamp((even + block - 1) / block * block, block, widest);
  parallel_for((n + width - 1) / width, 1, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) piece(p * width, std::min(width, n - p * width));
  });
}

// a [m, k] (rows lda apart) turned into dst [k, m], over the cores in runs
// of 128 of k.
void transpose_into(const float* a, int64_t m, int64_t k, int64_t lda, float* dst) {
  constexpr int64_t kRun = 128;
  parallel_for(chunk_count(k, kRun), 1, [&](int64_t first, int64_t last) {
    transpose_columns(a, m, lda, first * kRun, std::min(k, last * kRun), dst, m);
  });
}

}  // namespace

bool thin_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
  // A transposed B makes m tile_gemm's vector dimension: below 16 rows
  // most lanes would idle (a decode step of a few sequences), so BLAS keeps
  // those.
  if (!kTileGemmVectorised || m > kThinRows || k > kThinDepth || k == 0 ||
      (trans_b && m < kThinTransposedRows) || (beta != 0.0f && beta != 1.0f))
    return false;
  const bool accumulate = beta == 1.0f;
  // op(A)(i, p) = a[i * a_row + p * a_col].
  const int64_t a_row = trans_a ? 1 : lda, a_col = trans_a ? lda : 1;
  if (!trans_b) {  // B [k, n] row-major: read in place
    // Pieces of whole 32-column blocks (tile_gemm's AVX-512 block), at most
    // 256 wide: B's piece, k x 256, is what each block of C's rows reads again.
    over_pieces(n, 32, 256, [&](int64_t j0, int64_t width) {
      tile_gemm(m, width, k, alpha, a, a_row, a_col, b + j0, ldb, accumulate, c + j0, ldc);
    });
    return true;
  }
  // B stored [n, k] (a gradient's W^T): C^T [n, m] = B op(A)^T, whose right
  // operand op(A)^T [k, m] is A's storage when A is transposed and else a
  // copy (k x m: small, as m is); each piece's rows of C^T are then
  // transposed into C's columns.
  // The copies live on the calling thread between calls, as the workers only
  // read and write through pointers into them (up to n x m floats: 13 MB for
  // a 50257-token tied head at 64 rows).
  thread_local std::vector<float> a_t, c_t;
  const float* right = a;
  int64_t ld_right = lda;
  if (!trans_a) {
    a_t.resize(size_t(k * m));
    transpose_into(a, m, k, lda, a_t.data());
    right = a_t.data(), ld_right = m;
  }
  c_t.resize(size_t(n * m));
  float* ct = c_t.data();
  // Pieces of at most 64 of B's rows: each block of them reads all of
  // op(A)^T, however many blocks a piece holds, and with more pieces than
  // cores a core that starts late (a worker waking) takes fewer of them.
  over_pieces(n, 16, 64, [&](int64_t j0, int64_t width) {
    tile_gemm(width, m, k, alpha, b + j0 * ldb, ldb, 1, right, ld_right, false, ct + j0 * m, m);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = j0; j < j0 + width; ++j)
        c[i * ldc + j] = accumulate ? c[i * ldc + j] + ct[j * m + i] : ct[j * m + i];
  });
  return true;
}

void parallel_blas_gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha,
                        const float* a, int lda, const float* b, int ldb, float beta, float* c,
                        int ldc) {
  // Every call from autoshard's threads is single-threaded inside OpenBLAS.
  static const bool one_blas_thread = (openblas_set_num_threads(1), true);
  (void)one_blas_thread;
  const int threads = intra_op_threads();
  if (threads < 2 || int64_t{m} * n * std::max(k, 1) < kSplitWork) {
    one_gemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const auto [rows, cols] = grid(m, n, threads);
  const int64_t rm = piece_length(m, rows), cn = piece_length(n, cols);
  const int64_t row_pieces = (m + rm - 1) / rm, col_pieces = (n + cn - 1) / cn;
  parallel_for(row_pieces * col_pieces, 1, [&](int64_t first, int64_t last) {
    for (int64_t p = first; p < last; ++p) {
      const int64_t i0 = p / col_pieces * rm, j0 = p % col_pieces * cn;
      const int64_t pm = std::min<int64_t>(rm, m - i0), pn = std::min<int64_t>(cn, n - j0);
      // op(A)'s rows i0.. and op(B)'s columns j0.. (row-major storage).
      const float* pa = trans_a ? a + i0 : a + i0 * lda;
      const float* pb = trans_b ? b + j0 * ldb : b + j0;
      one_gemm(trans_a, trans_b, int(pm), int(pn), k, alpha, pa, lda, pb, ldb, beta,
               c + i0 * ldc + j0, ldc);
    }
  });
}

}  // namespace autoshard
