// Branch-free exp and tanh that the compiler vectorises (libm's are scalar
// calls and dominated the GELU and softmax kernels). Accuracy: exp within 2
// ulp over its range (Cody-Waite reduction and a degree-6 polynomial); tanh
// within about 1e-7 absolute. Both keep NaN and infinities as std::exp and
// std::tanh do (exp(NaN) = NaN, exp(+inf) = +inf), so a diverged value is
// never turned into a finite one.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace autoshard {

inline float fast_exp(float x) {
  const float in = x;
  // The clamp keeps the exponent bits below in range (NaN goes to the low
  // end, so the integer conversion stays defined); the select at the end
  // gives NaN and overflow their own results.
  x = x >= -87.3f ? (x > 88.3f ? 88.3f : x) : -87.3f;
  // Round x / ln2 to nearest by adding and subtracting 1.5 * 2^23 (floorf
  // would not vectorise without -fno-trapping-math).
  constexpr float kRound = 12582912.0f;
  const float n = (x * 1.44269504088896341f + kRound) - kRound;
  // r = x - n ln2, with ln2 split in two so the product stays exact.
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const float y = p * scale;
  // Above log(FLT_MAX) the float result overflows: +inf, not exp(88.3).
  return in != in ? in : (in > 88.72283935546875f ? INFINITY : y);
}

inline float fast_tanh(float x) {
  x = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

}  // namespace autoshard
