// The formats decoding may hold weights in: f32 as trained, bf16 (the top
// half of an f32, as checkpoint files store it) or int8 with one f32 scale
// per output channel. The conversions are in src/tensor/quantize.h, the
// kernels in src/ir/ops/quantized_gemv.h, the rounding of a model's weights
// in autoshard/nn/generation.h (quantize_weights).
#pragma once

#include <cstdint>
#include <string>

namespace autoshard {

enum class WeightsDType : uint8_t { F32, BF16, Int8 };

// "f32", "bf16", "int8"; anything else is an autoshard::Error naming `what`
// (the flag or field) and the accepted values.
WeightsDType parse_weights_dtype(const std::string& text, const std::string& what);
const char* weights_dtype_name(WeightsDType dtype);
// Bytes of one stored element (int8's scales aside).
inline int weights_dtype_bytes(WeightsDType dtype) {
  return dtype == WeightsDType::F32 ? 4 : dtype == WeightsDType::BF16 ? 2 : 1;
}

}  // namespace autoshard
