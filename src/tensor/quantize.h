// Element conversions of the weight formats (autoshard/tensor/weights_dtype.h),
// a matrix held in one of them (the compact copy a tensor may hold:
// Tensor::quantized) and int8's scale rule (weight-only quantization: activations stay f32 but
// for the 16-bit fixed-point input of the int8 product, see
// quantized_gemv.cc); the matrix-vector kernels that read the formats are
// in src/ir/ops/quantized_gemv.h.
//
// Why per output channel and not Q8_0's blocks of 32 along the contraction:
// the scale then multiplies each output once, after its dot product, so the
// inner loop needs no per-block weight scale in either weight orientation
// ([out, in] dot products or [in, out] row streams, where a block along
// `in` would be strided); and a scale depends only on its
// channel, so a block of the weight split over a mesh keeps its channels'
// scales whatever the split. The price is a coarser grid for a channel with
// one outlier (a block of 32 would confine it); the recorded losses
// (bench/README.md) show the cost on a trained model.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "autoshard/tensor/weights_dtype.h"
#include "tensor/large_array.h"

namespace autoshard {

// f32 -> bfloat16, rounded to nearest even (as PyTorch's .bfloat16()); a NaN
// stays a (quiet) NaN, infinities stay infinite.
inline uint16_t bf16_round(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
inline float bf16_widen(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// The int8 scale of a channel whose largest magnitude is `max_abs`: the
// channel's values map onto -127..127 (symmetric: -128 is never used, so
// negation is exact). An all-zero channel has scale 0 and codes 0.
inline float int8_scale(float max_abs) {
  return max_abs / 127.0f;
}
// The code of `x` under `scale`: round to nearest (ties to even), clamped.
inline int8_t int8_code(float x, float scale) {
  if (scale == 0) return 0;
  const float q = std::nearbyint(x / scale);
  return static_cast<int8_t>(q > 127 ? 127 : q < -127 ? -127 : q);
}
inline float int8_value(int8_t code, float scale) {
  return static_cast<float>(code) * scale;
}

// One device's block of a weight as a matrix of `outputs` x `inner` (the
// contraction), in bf16 or int8: the compact copy that a tensor's storage
// may hold beside its f32 values (Tensor::quantized).
struct QuantizedMatrix {
  WeightsDType dtype = WeightsDType::BF16;
  int64_t outputs = 0, inner = 0;
  // Layout of the elements: [outputs, inner] (a tied head's [vocab, width],
  // an einsum's "btc,vc->btv") or [inner, outputs] (a Dense kernel [in,
  // out]), row-major, as the f32 block.
  bool outputs_first = false;
  // On huge pages when large, as tensors are (tensor/large_array.h).
  std::vector<uint16_t, LargeArrayAllocator<uint16_t>> bf16;  // bf16 elements
  std::vector<int8_t, LargeArrayAllocator<int8_t>> codes;     // int8 elements
  std::vector<float> scales;                                  // int8: one per output
  // Bytes a product reads from this matrix.
  int64_t bytes() const {
    return int64_t(bf16.size()) * 2 + int64_t(codes.size()) + int64_t(scales.size()) * 4;
  }
};

}  // namespace autoshard
