// Branch-free exp and tanh that the compiler vectorises (libm's are scalar
// calls and dominated the GELU and softmax kernels). Accuracy: exp within 2
// ulp over its range (Cody-Waite reduction and a degree-6 polynomial); tanh
// within about 1e-7 absolute. NaN gives NaN (a diverged value never turns
// finite). exp's argument is clamped to [-87.3, 88.3]: its callers pass a
// shifted softmax's x - max <= 0, tanh's bounded 2x, or divide by it
// (sigmoid's 1 / (1 + exp(-x)), 0 to float precision at the top); a caller
// that needs exp's overflow to +inf uses std::exp.
#pragma once

#include <cstdint>
#include <cstring>

namespace autoshard {

inline float fast_exp(float x) {
  // A NaN passes the clamp (both compares are false) and every step after.
  x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
  // Round x / ln2 to nearest by adding 1.5 * 2^23 (floorf would not
  // vectorise without -fno-trapping-math): t's low mantissa bits then hold
  // the integer n, read from its bits (a float-to-int conversion of a NaN
  // would be undefined).
  constexpr float kRound = 12582912.0f;
  constexpr int32_t kRoundBits = 0x4B400000;
  const float t = x * 1.44269504088896341f + kRound;
  const float n = t - kRound;
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
  int32_t t_bits;
  std::memcpy(&t_bits, &t, sizeof t_bits);
  const int32_t bits = (t_bits - kRoundBits + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

inline float fast_tanh(float x) {
  x = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

}  // namespace autoshard
