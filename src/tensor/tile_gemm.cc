#include "tensor/tile_gemm.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
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

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
namespace {

#if defined(__AVX512F__)
// 16 lanes in 32 registers: blocks of 8 rows x 32 columns, 16 accumulators,
// leaving registers for B's row and A's broadcast.
struct Isa {
  using Vec = __m512;
  using Mask = __mmask16;
  static constexpr int kLanes = 16, kRows = 8, kVectors = 2;
  static Mask first(int64_t lanes) { return static_cast<Mask>((1u << lanes) - 1); }
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec broadcast(float x) { return _mm512_set1_ps(x); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec load(Mask m, const float* p) { return _mm512_maskz_loadu_ps(m, p); }
  static void store(float* p, Vec v) { _mm512_storeu_ps(p, v); }
  static void store(Mask m, float* p, Vec v) { _mm512_mask_storeu_ps(p, m, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm512_mul_ps(a, b); }
};
#else
// AVX2: 8 lanes in 16 registers: blocks of 6 rows x 16 columns, 12
// accumulators, two vectors of B's row and A's broadcast.
struct Isa {
  using Vec = __m256;
  using Mask = __m256i;
  static constexpr int kLanes = 8, kRows = 6, kVectors = 2;
  static Mask first(int64_t lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec broadcast(float x) { return _mm256_set1_ps(x); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec load(Mask m, const float* p) { return _mm256_maskload_ps(p, m); }
  static void store(float* p, Vec v) { _mm256_storeu_ps(p, v); }
  static void store(Mask m, float* p, Vec v) { _mm256_maskstore_ps(p, m, v); }
  static Vec fma(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static Vec mul(Vec a, Vec b) { return _mm256_mul_ps(a, b); }
};
#endif

using Vec = Isa::Vec;
using Mask = Isa::Mask;
constexpr int kLanes = Isa::kLanes, kRows = Isa::kRows, kVectors = Isa::kVectors;
constexpr int kWidth = kLanes * kVectors;

// C[rows x (kLanes (vectors - 1) + last)] from its k-long chains. Only a
// partial block (last < kLanes) masks its last vector: AMD's masked AVX2
// moves are slow, and a full tile needs none.
template <int rows, int vectors, bool partial>
void block(int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
           int64_t ldb, bool accumulate, float* c, int64_t ldc, int64_t last) {
  const Mask tail = Isa::first(partial ? last : kLanes);
  // Masked lanes are neither read nor written: a tile's last columns may
  // end its buffer.
  const auto load = [tail](int v, const float* p) {
    return partial && v + 1 == vectors ? Isa::load(tail, p) : Isa::load(p);
  };
  const auto store = [tail](int v, float* p, Vec x) {
    if (partial && v + 1 == vectors)
      Isa::store(tail, p, x);
    else
      Isa::store(p, x);
  };
  // Every loop over rows and vectors is unrolled so that acc stays in
  // registers (left as loops, GCC kept it on the stack: 40% of the speed).
  Vec acc[rows][vectors];
#pragma GCC unroll 8
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < vectors; ++v) acc[r][v] = Isa::zero();
  for (int64_t p = 0; p < k; ++p) {
    const float* bp = b + p * ldb;
    Vec bv[vectors];
#pragma GCC unroll 8
    for (int v = 0; v < vectors; ++v) bv[v] = load(v, bp + kLanes * v);
    const float* ap = a + p * a_col;
#pragma GCC unroll 8
    for (int r = 0; r < rows; ++r) {
      const Vec av = Isa::broadcast(ap[r * a_row]);
#pragma GCC unroll 8
      for (int v = 0; v < vectors; ++v) acc[r][v] = Isa::fma(av, bv[v], acc[r][v]);
    }
  }
  const Vec scale = Isa::broadcast(alpha);
#pragma GCC unroll 8
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < vectors; ++v) {
      float* cr = c + r * ldc + kLanes * v;
      store(v, cr,
            accumulate ? Isa::fma(scale, acc[r][v], load(v, cr)) : Isa::mul(scale, acc[r][v]));
    }
}

using Block = void (*)(int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, bool,
                       float*, int64_t, int64_t);
using Blocks = std::array<std::array<Block, 2>, kVectors>;  // [vectors - 1][partial]

// blocks[rows - 1][vectors - 1][partial]: every block shape a tile's edges
// need.
template <int... rows>
constexpr std::array<Blocks, kRows> block_table(std::integer_sequence<int, rows...>) {
  static_assert(kVectors == 2);
  return {Blocks{{{block<rows + 1, 1, false>, block<rows + 1, 1, true>},
                  {block<rows + 1, 2, false>, block<rows + 1, 2, true>}}}...};
}
constexpr auto kBlocks = block_table(std::make_integer_sequence<int, kRows>{});

}  // namespace

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  for (int64_t i0 = 0; i0 < m; i0 += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, m - i0);
    for (int64_t j0 = 0; j0 < n; j0 += kWidth) {
      const int64_t cols = std::min<int64_t>(kWidth, n - j0);
      const int64_t vectors = (cols + kLanes - 1) / kLanes, last = cols - kLanes * (vectors - 1);
      kBlocks[rows - 1][vectors - 1][last < kLanes](k, alpha, a + i0 * a_row, a_row, a_col, b + j0,
                                                    ldb, accumulate, c + i0 * ldc + j0, ldc, last);
    }
  }
}

#else  // neither AVX-512 nor AVX2 with FMA compiled in: the plain loops

void tile_gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row,
               int64_t a_col, const float* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  tile_gemm_reference(m, n, k, alpha, a, a_row, a_col, b, ldb, accumulate, c, ldc);
}

#endif

}  // namespace autoshard
