// Sixteen floats as one GCC vector: one AVX-512 register, two AVX ones, or
// four SSE ones, whatever the target has; the compiler lowers each operator
// lane by lane. For the short rows of a kernel's inner loop (a 64-key tile
// of attention scores), where the auto-vectoriser would leave a reduction
// scalar. Built without AVX-512 (AUTOSHARD_NATIVE off), GCC notes that such
// a vector passed by value changes the ABI; every function here is inline.
#pragma once

#include <cstring>

namespace autoshard {

using f32x16 = float __attribute__((vector_size(64)));

// Loads and stores of any of these vectors where floats lie (no alignment
// asked), and lane by lane max(a, b) that keeps a NaN from either side (as
// lanes.h's nan_max).
template <typename V>
inline V load_lanes(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
inline void store_lanes(float* p, V v) {
  std::memcpy(p, &v, sizeof v);
}
template <typename V>
inline V nan_max_lanes(V a, V b) {
  return (b > a) | (b != b) ? b : a;
}

inline f32x16 load16(const float* p) {
  return load_lanes<f32x16>(p);
}
inline void store16(float* p, f32x16 v) {
  store_lanes(p, v);
}
inline f32x16 nan_max16(f32x16 a, f32x16 b) {
  return nan_max_lanes(a, b);
}

// The lanes' maximum (NaN if any lane is NaN) and sum, halving the vector
// down to its last lanes: the same order on every call.
inline float max16(f32x16 v) {
  const f32x16 a = nan_max16(
      v, __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7));
  const f32x16 b = nan_max16(
      a, __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11));
  const f32x16 c = nan_max16(
      b, __builtin_shufflevector(b, b, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13));
  const f32x16 d = nan_max16(
      c, __builtin_shufflevector(c, c, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14));
  return d[0];
}
inline float sum16(f32x16 v) {
  const f32x16 a =
      v + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  const f32x16 b =
      a + __builtin_shufflevector(a, a, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
  const f32x16 c =
      b + __builtin_shufflevector(b, b, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
  return c[0] + c[1];
}

// A vector as wide as the CPU's registers: 16 floats with AVX-512, else 8
// (AVX2). Where f32x16 is wider than a register (AVX2), GCC splits it
// through memory, and a value a loop carries, or an array of them, stays on
// the stack: on an AMD EPYC (Zen 3) the attention's whole-row softmax took
// as long as the tile products beside it, and bf16 decoding ran at 55% of
// the bandwidth limit. Kernels whose vectors live across a loop use this.
#if defined(__AVX512F__)
constexpr int kRegisterLanes = 16;
#else
constexpr int kRegisterLanes = 8;
#endif
using f32xR = float __attribute__((vector_size(4 * kRegisterLanes)));

// The lanes' maximum (NaN if any lane is NaN) and sum, lane 0 first.
inline float max_of_lanes(f32xR v) {
  float m = v[0];
  for (int l = 1; l < kRegisterLanes; ++l) m = (v[l] > m) | (v[l] != v[l]) ? v[l] : m;
  return m;
}
inline float sum_of_lanes(f32xR v) {
  float s = v[0];
  for (int l = 1; l < kRegisterLanes; ++l) s += v[l];
  return s;
}

}  // namespace autoshard
