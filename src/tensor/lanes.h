// Reductions over a row in a fixed number of independent lanes. A plain
// `s += f(i)` loop is a serial chain the compiler may not reorder (no
// -ffast-math), so it runs one element at a time; kLanes accumulators are
// independent, so the loop vectorises, and the lanes combine in a fixed
// order: the same bits on every call and every machine width.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "tensor/vec16.h"

namespace autoshard {

constexpr int kLanes = 16;

// Sum of f(i) for i in [begin, end) in kLanes float lanes.
template <typename F>
float float_lanes(int64_t begin, int64_t end, F f) {
  float lane[kLanes] = {};
  int64_t i = begin;
  for (; i + kLanes <= end; i += kLanes)
    for (int j = 0; j < kLanes; ++j) lane[j] += static_cast<float>(f(i + j));
  for (int j = 0; i < end; ++i, ++j) lane[j] += static_cast<float>(f(i));
  float s = 0;
  for (int j = 0; j < kLanes; ++j) s += lane[j];
  return s;
}

// Sum of f(i) for i in [0, n). Acc = double sums float-lane blocks of 1024
// elements in double: close to a double sum on long rows, at float speed
// (double lanes do not vectorise next to float math).
template <typename Acc, typename F>
Acc lane_sum(int64_t n, F f) {
  if constexpr (sizeof(Acc) == sizeof(float)) {
    return float_lanes(0, n, f);
  } else {
    constexpr int64_t kBlock = 1024;
    Acc s = 0;
    for (int64_t b = 0; b < n; b += kBlock) s += float_lanes(b, std::min(n, b + kBlock), f);
    return s;
  }
}

// max(a, b) that keeps a NaN from either side, as PyTorch's max, amax and
// max pooling do (std::max(a, b) drops a NaN in b, so a maximum would hide
// one). Two compares and a select, without a branch: loops over elements
// (max pooling's channels) still vectorise.
inline float nan_max(float a, float b) {
  return (b > a) | (b != b) ? b : a;
}

// Maximum of x[0..n); -inf for n == 0; NaN if any element is NaN. The lanes
// take plain maxima (one instruction each) and, beside them, sums: a sum is
// finite unless some element is NaN or infinite (or the sum overflows), and
// only then does a second, exact pass run (nan_max in a serial chain costs
// several times the plain one). The lanes are one vector (GCC left an
// array of sixteen scalar maxima unvectorised).
inline float lane_max(const float* x, int64_t n) {
  static_assert(kLanes == 16, "the lanes are one f32x16");
  f32x16 lanes = f32x16{} - INFINITY, sums{};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f32x16 v = load16(x + i);
    lanes = lanes < v ? v : lanes;
    sums += v;
  }
  float lane[kLanes], sum[kLanes];
  store16(lane, lanes);
  store16(sum, sums);
  for (int j = 0; i < n; ++i, ++j) lane[j] = std::max(lane[j], x[i]), sum[j] += x[i];
  float s = 0;
  for (int j = 0; j < kLanes; ++j) s += sum[j];
  if (s - s == 0.0f) return *std::max_element(lane, lane + kLanes);
  float m = -INFINITY;
  for (int64_t k = 0; k < n; ++k) m = nan_max(m, x[k]);
  return m;
}

}  // namespace autoshard
