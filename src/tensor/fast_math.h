// Branch-free exp and tanh that the compiler vectorises (libm's are scalar
// calls and dominated the GELU and softmax kernels). Accuracy: exp within 2
// ulp over its range (Cody-Waite reduction and a degree-6 polynomial); tanh
// within about 1e-7 absolute. NaN gives NaN (a diverged value never turns
// finite). exp's argument is clamped to [-87.3, 88.3]: its callers pass a
// shifted softmax's x - max <= 0, tanh's bounded 2x, or divide by it
// (sigmoid's 1 / (1 + exp(-x)), 0 to float precision at the top); a caller
// that needs exp's overflow to +inf uses std::exp.
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace autoshard {

// F is float, or a GCC vector of floats (tensor/vec16.h): the same steps on
// every lane, so a lane's bits are the scalar call's.
template <typename F>
[[gnu::always_inline]] inline F fast_exp(F x) {
  // Integers of F's width: int32_t, or the vector a comparison of F gives.
  using I = std::conditional_t<std::is_same_v<F, float>, int32_t, decltype(x < x)>;
  const F zero{};
  // A NaN passes the clamp (both compares are false) and every step after.
  x = x < zero - 87.3f ? zero - 87.3f : x;
  x = x > zero + 88.3f ? zero + 88.3f : x;
  // Round x / ln2 to nearest by adding 1.5 * 2^23 (floorf would not
  // vectorise where -fno-trapping-math is not set): t's low mantissa bits then hold
  // the integer n, read from its bits (a float-to-int conversion of a NaN
  // would be undefined).
  constexpr float kRound = 12582912.0f;
  constexpr int32_t kRoundBits = 0x4B400000;
  const F t = x * 1.44269504088896341f + kRound;
  const F n = t - kRound;
  // r = x - n ln2, with ln2 split in two so the product stays exact.
  F r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  F p = zero + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const I bits = (std::bit_cast<I>(t) - kRoundBits + 127) << 23;
  return p * std::bit_cast<F>(bits);
}

// Sigmoid through the vectorised exp: within a few float ulp of the double
// reference. Below -88.3 (where the clamped exp would leave about 4.6e-39)
// it is exactly 0, as float's own exp overflowing gives: silu(-inf) is then
// -inf * 0 = NaN, PyTorch's answer.
inline float fast_sigmoid(float x) {
  return x < -88.3f ? 0.0f : 1.0f / (1.0f + fast_exp(-x));
}

inline float fast_tanh(float x) {
  x = x < -9.0f ? -9.0f : (x > 9.0f ? 9.0f : x);
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

}  // namespace autoshard
