#include "ir/ops/quantized_gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "autoshard/tensor/parallel.h"
#include "tensor/vec16.h"

namespace autoshard {

namespace {

// Widening of a stored element to f32: exact for both formats (an int8 code
// is a small integer; a bf16 is the top half of an f32; an f32 weight is
// itself). The int8 scale is applied once per output, after its sum.
inline float widen(float f) {
  return f;
}
inline float widen(uint16_t h) {
  return bf16_widen(h);
}
inline float widen(int8_t c) {
  return static_cast<float>(c);
}

// The dot products' vectors are as wide as the CPU's registers
// (tensor/vec16.h's f32xR); the stored elements of one of them:
using u16xR = uint16_t __attribute__((vector_size(2 * kRegisterLanes)));
using u32xR = uint32_t __attribute__((vector_size(4 * kRegisterLanes)));
using i8xR = int8_t __attribute__((vector_size(kRegisterLanes)));

// kRegisterLanes stored elements widened to f32 lanes.
inline f32xR widen_lanes(const float* p) {
  return load_lanes<f32xR>(p);
}
inline f32xR widen_lanes(const uint16_t* p) {
  u16xR h;
  std::memcpy(&h, p, sizeof h);
  return std::bit_cast<f32xR>(__builtin_convertvector(h, u32xR) << 16);
}
// int8 codes by intrinsics: for GCC's generic conversion of int8 lanes
// (one code at a time on AVX2, several steps on AVX-512) one core widened
// 12 G codes/s on an Intel Xeon against 18 for these two instructions.
// (GCC 12 reports its own intrinsics' _mm512_undefined_* as maybe
// uninitialized once inlined: a known false positive.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
inline f32xR widen_lanes(const int8_t* p) {
#if defined(__AVX512F__)
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
#elif defined(__AVX2__)
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
#else
  i8xR c;
  std::memcpy(&c, p, sizeof c);
  return __builtin_convertvector(c, f32xR);
#endif
}
#pragma GCC diagnostic pop

// How far ahead of a row's reads the next bytes are asked for: one stream
// per core did not keep memory busy on a 2-core Intel Xeon VM (bf16 decoding
// at 57% of the copy bandwidth; 2 KiB ahead, 77%; further ahead, less).
constexpr int64_t kPrefetchBytes = 2048;

// Whether rows ask for their bytes ahead (kPrefetchBytes). On a 2-core AMD
// EPYC (Zen 4) VM the requests cost decoding speed: int8 on llama-1b ran at
// 44% of the copy bandwidth with them and 73-79% without; f32 on llama-124m
// made 78 tokens/s with them and 83 without in alternating runs (bf16 the
// same either way). AMD's cores leave the streams to their own prefetchers.
bool software_prefetch() {
  static const bool on = !__builtin_cpu_is("amd");
  return on;
}

// [outputs, inner]: one dot product per output row in 64 / kRegisterLanes
// vectors of independent fused multiply-add chains, summed as a tree; x
// stays in cache across rows.
template <typename E, bool kPrefetch>
float dot_row(const E* w, const float* x, int64_t n) {
  constexpr int64_t ahead = kPrefetchBytes / sizeof(E);
  constexpr int kChains = 64 / kRegisterLanes;
  f32xR acc[kChains] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    // The cache lines 64 elements take (1 to 4), kPrefetchBytes ahead.
    if constexpr (kPrefetch)
      for (size_t line = 0; line < 64 * sizeof(E); line += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(w + i + ahead) + line);
#pragma GCC unroll 8
    for (int c = 0; c < kChains; ++c)
      acc[c] += widen_lanes(x + i + kRegisterLanes * c) * widen_lanes(w + i + kRegisterLanes * c);
  }
  for (int half = kChains / 2; half > 0; half /= 2)
    for (int c = 0; c < half; ++c) acc[c] += acc[c + half];
  float s = sum_of_lanes(acc[0]);
  for (; i < n; ++i) s += x[i] * widen(w[i]);
  return s;
}

// Rows per task of a product over whole rows: tasks of about 256 KiB of
// stored weights, their number a multiple of the threads that share the
// product so that each gets the same share. (A fixed 64 Ki-weight grain cut a 768 x 768
// product into nine tasks of 85 rows and one of 3: on 2 threads one thread
// read a ninth more weights than the other while the other waited.) Bytes
// rather than weights: each task is a stream that the core's prefetchers
// must pick up anew, and 64 Ki weights of bf16 or int8 were streams of 128
// or 64 KiB (llama-1b on a 2-core Zen 4, alternating runs: bf16 13.3 ->
// 14.4-14.8 tokens/s, int8 26.0 -> 32.1). Each output is one dot product
// whichever task computes it, so the bits do not depend on the split.
// A product is shared by as many threads as get 16 KiB or more each, even
// under 256 KiB (an int8 k or v projection of llama-124m, 192 KiB, had run
// on one core).
int64_t rows_per_task(int64_t outputs, int64_t inner, int64_t element_bytes) {
  constexpr int64_t kTaskBytes = int64_t{256} << 10, kLeastShare = int64_t{16} << 10;
  const int64_t bytes = outputs * std::max<int64_t>(inner, 1) * element_bytes;
  const int64_t sharers = std::clamp<int64_t>(bytes / kLeastShare, 1, intra_op_threads());
  const int64_t by_size = (bytes + kTaskBytes - 1) / kTaskBytes;
  const int64_t tasks = (std::max(by_size, sharers) + sharers - 1) / sharers * sharers;
  return std::max<int64_t>(1, (outputs + tasks - 1) / tasks);
}

// Both layouts take the matrix's row stride `ld` (inner or outputs for a
// whole matrix; more for a block of a wider one).
template <typename E>
void gemv_outputs_first(const E* w, int64_t ld, const float* scales, int64_t outputs, int64_t inner,
                        const float* x, float* y);

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// int8 rows against x in 16-bit fixed point. Widening every code to f32
// costs three instructions per 16 codes, which held int8 decoding at 60-65%
// of the bandwidth limit (one core converts about 12-18 G codes/s, less than
// memory delivers to it). Instead x is rounded once per product to int16 in
// blocks of 64 elements, each with its own scale (the block's largest
// magnitude / 32767, so an element's error is at most 2^-16 of its block's
// largest), and a row's 64 codes meet a block in two instructions: widen
// to int16, then VNNI's vpdpwssd (32 products summed into 16 int32 lanes;
// |code| <= 127 and |x| <= 32767 over 4 products per lane cannot
// overflow). Each block's integer sum is then scaled into an f32
// accumulator. Elements past the last whole block use x in f32.
struct FixedPointX {
  std::vector<int16_t> values;  // [blocks * 64]
  std::vector<float> scales;    // [blocks]
  int64_t blocks() const { return int64_t(scales.size()); }
};
constexpr int64_t kFixedBlock = 64;

// Returns false, for the caller to use the f32 path, when x holds a NaN or
// an infinity (fixed point has neither: they would vanish from the sums).
bool to_fixed_point(const float* x, int64_t n, FixedPointX& q) {
  q.scales.resize(size_t(n / kFixedBlock));
  q.values.resize(size_t(q.blocks() * kFixedBlock));
  for (int64_t b = 0; b < q.blocks(); ++b) {
    const float* xb = x + b * kFixedBlock;
    float largest = 0;
    for (int64_t i = 0; i < kFixedBlock; ++i) {
      const float magnitude = std::fabs(xb[i]);
      if (!(magnitude <= std::numeric_limits<float>::max())) return false;  // NaN too
      largest = std::max(largest, magnitude);
    }
    const float scale = largest / 32767.0f;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    for (int64_t i = 0; i < kFixedBlock; ++i)
      q.values[size_t(b * kFixedBlock + i)] =
          static_cast<int16_t>(std::clamp(std::nearbyint(xb[i] * inverse), -32767.0f, 32767.0f));
    q.scales[size_t(b)] = scale;
  }
  for (int64_t i = q.blocks() * kFixedBlock; i < n; ++i)  // the tail is read in f32
    if (!std::isfinite(x[i])) return false;
  return true;
}

// (GCC 12 reports its own intrinsics' _mm512_undefined_* as uninitialized
// once inlined, as above.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// The integer sum of 64 codes times one block of fixed-point x, as f32 lanes.
inline __m512 block_product(const int8_t* w, const int16_t* xq) {
  const __m512i codes = _mm512_loadu_si512(w);
  __m512i sum = _mm512_dpwssd_epi32(_mm512_setzero_si512(),
                                    _mm512_cvtepi8_epi16(_mm512_castsi512_si256(codes)),
                                    _mm512_loadu_si512(xq));
  sum = _mm512_dpwssd_epi32(sum, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(codes, 1)),
                            _mm512_loadu_si512(xq + 32));
  return _mm512_cvtepi32_ps(sum);
}

template <bool kPrefetch>
float dot_row_fixed(const int8_t* w, const FixedPointX& q, const float* x, int64_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0;
  int64_t b = 0;
  for (; b + 2 <= q.blocks(); b += 2) {
    const int64_t i = b * kFixedBlock;
    if constexpr (kPrefetch) {
      __builtin_prefetch(w + i + kPrefetchBytes);
      __builtin_prefetch(w + i + kPrefetchBytes + 64);
    }
    a0 =
        _mm512_fmadd_ps(block_product(w + i, q.values.data() + i), _mm512_set1_ps(q.scales[b]), a0);
    a1 = _mm512_fmadd_ps(block_product(w + i + kFixedBlock, q.values.data() + i + kFixedBlock),
                         _mm512_set1_ps(q.scales[b + 1]), a1);
  }
  if (b < q.blocks())
    a0 = _mm512_fmadd_ps(block_product(w + b * kFixedBlock, q.values.data() + b * kFixedBlock),
                         _mm512_set1_ps(q.scales[b]), a0);
  float s = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  for (int64_t i = q.blocks() * kFixedBlock; i < n; ++i) s += x[i] * widen(w[i]);
  return s;
}

void gemv_outputs_first(const int8_t* w, int64_t ld, const float* scales, int64_t outputs,
                        int64_t inner, const float* x, float* y) {
  // The caller's scratch, named here: a thread_local named inside the body
  // would be each worker's own (empty) one.
  thread_local FixedPointX scratch;
  FixedPointX& q = scratch;
  if (!to_fixed_point(x, inner, q))
    return gemv_outputs_first<int8_t>(w, ld, scales, outputs, inner, x, y);
  const auto rows = [&]<bool kPrefetch>(int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o)
      y[o] = dot_row_fixed<kPrefetch>(w + o * ld, q, x, inner) * scales[o];
  };
  const bool ahead = software_prefetch();
  parallel_for(outputs, rows_per_task(outputs, inner, sizeof(int8_t)),
               [&](int64_t begin, int64_t end) {
                 ahead ? rows.template operator()<true>(begin, end)
                       : rows.template operator()<false>(begin, end);
               });
}
#pragma GCC diagnostic pop
#endif

template <typename E>
void gemv_outputs_first(const E* w, int64_t ld, const float* scales, int64_t outputs, int64_t inner,
                        const float* x, float* y) {
  const auto rows = [&]<bool kPrefetch>(int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const float s = dot_row<E, kPrefetch>(w + o * ld, x, inner);
      y[o] = scales ? s * scales[o] : s;
    }
  };
  const bool ahead = software_prefetch();
  parallel_for(outputs, rows_per_task(outputs, inner, sizeof(E)), [&](int64_t begin, int64_t end) {
    ahead ? rows.template operator()<true>(begin, end)
          : rows.template operator()<false>(begin, end);
  });
}

// [inner, outputs]: each input row scales into a band of outputs. A task
// owns `kBand` outputs and streams its band of every row (contiguous bytes)
// into accumulators that stay in L1; four rows per pass halve the
// accumulators' loads and stores.
template <typename E>
void gemv_inner_first(const E* w, int64_t ld, const float* scales, int64_t outputs, int64_t inner,
                      const float* x, float* y) {
  constexpr int64_t kBand = 512;
  parallel_for(outputs, kBand, [&](int64_t begin, int64_t end) {
    alignas(64) float acc[kBand] = {};
    const int64_t n = end - begin;
    int64_t i = 0;
    for (; i + 4 <= inner; i += 4) {
      const E* r0 = w + i * ld + begin;
      const E* r1 = r0 + ld;
      const E* r2 = r1 + ld;
      const E* r3 = r2 + ld;
      const float x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
      for (int64_t j = 0; j < n; ++j)
        acc[j] += (x0 * widen(r0[j]) + x1 * widen(r1[j])) + (x2 * widen(r2[j]) + x3 * widen(r3[j]));
    }
    for (; i < inner; ++i) {
      const E* r = w + i * ld + begin;
      const float xi = x[i];
      for (int64_t j = 0; j < n; ++j) acc[j] += xi * widen(r[j]);
    }
    for (int64_t j = 0; j < n; ++j) y[begin + j] = scales ? acc[j] * scales[begin + j] : acc[j];
  });
}

// y = op(W) x in either layout, W's rows `ld` apart.
template <typename E>
void gemv(bool outputs_first, const E* w, int64_t ld, const float* scales, int64_t outputs,
          int64_t inner, const float* x, float* y) {
  if (outputs_first)
    gemv_outputs_first(w, ld, scales, outputs, inner, x, y);
  else
    gemv_inner_first(w, ld, scales, outputs, inner, x, y);
}

template <typename E>
void gemv(const QuantizedMatrix& m, const E* w, const float* x, float* y) {
  gemv(m.outputs_first, w, m.outputs_first ? m.inner : m.outputs,
       m.scales.empty() ? nullptr : m.scales.data(), m.outputs, m.inner, x, y);
}

template <typename E>
void gemv_reference(const QuantizedMatrix& m, const E* w, const float* x, float* y) {
  for (int64_t o = 0; o < m.outputs; ++o) {
    double s = 0;
    for (int64_t i = 0; i < m.inner; ++i) {
      const E e = m.outputs_first ? w[o * m.inner + i] : w[i * m.outputs + o];
      s += double(x[i]) * double(widen(e));
    }
    y[o] = m.scales.empty() ? float(s) : float(s * double(m.scales[o]));
  }
}

// y = alpha * product + beta * y for a kernel `product(x, y)` that writes
// contiguous y from contiguous x: gathers x and scatters y around it when
// the strides or the scalars ask for it.
template <typename Product>
void strided(int64_t outputs, int64_t inner, const float* x, int64_t incx, float alpha, float beta,
             float* y, int64_t incy, const Product& product) {
  std::vector<float> xs, ys;
  if (incx != 1) {
    xs.resize(static_cast<size_t>(inner));
    for (int64_t i = 0; i < inner; ++i) xs[i] = x[i * incx];
    x = xs.data();
  }
  const bool direct = incy == 1 && alpha == 1 && beta == 0;
  if (!direct) ys.resize(static_cast<size_t>(outputs));
  product(x, direct ? y : ys.data());
  if (!direct)
    for (int64_t o = 0; o < outputs; ++o) {
      float& c = y[o * incy];
      c = beta == 0 ? alpha * ys[o] : alpha * ys[o] + beta * c;  // beta 0: C is not read
    }
}

// Products on a compact copy, for tests and the bench (a statistic, read by
// no kernel).
std::atomic<int64_t> compact_products{0};

}  // namespace

void quantized_gemv(const QuantizedMatrix& w, const float* x, float* y) {
  if (w.dtype == WeightsDType::BF16)
    gemv(w, w.bf16.data(), x, y);
  else
    gemv(w, w.codes.data(), x, y);
}

void quantized_gemv_reference(const QuantizedMatrix& w, const float* x, float* y) {
  if (w.dtype == WeightsDType::BF16)
    gemv_reference(w, w.bf16.data(), x, y);
  else
    gemv_reference(w, w.codes.data(), x, y);
}

int64_t quantized_gemv_calls() {
  return compact_products.load();
}

bool quantized_gemv_if_fits(const QuantizedMatrix* m, bool rows_are_outputs, int64_t outputs,
                            int64_t inner, int64_t ldw, const float* x, int64_t incx, float alpha,
                            float beta, float* y, int64_t incy) {
  if (!m || m->outputs_first != rows_are_outputs || m->outputs != outputs || m->inner != inner ||
      ldw != (rows_are_outputs ? inner : outputs))
    return false;
  compact_products.fetch_add(1, std::memory_order_relaxed);
  strided(outputs, inner, x, incx, alpha, beta, y, incy,
          [&](const float* xc, float* yc) { quantized_gemv(*m, xc, yc); });
  return true;
}

void f32_gemv(bool rows_are_outputs, int64_t outputs, int64_t inner, const float* w, int64_t ldw,
              const float* x, int64_t incx, float alpha, float beta, float* y, int64_t incy) {
  strided(outputs, inner, x, incx, alpha, beta, y, incy, [&](const float* xc, float* yc) {
    gemv(rows_are_outputs, w, ldw, nullptr, outputs, inner, xc, yc);
  });
}

}  // namespace autoshard
