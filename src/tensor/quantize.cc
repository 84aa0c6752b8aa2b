#include "tensor/quantize.h"

#include "autoshard/error.h"

namespace autoshard {

WeightsDType parse_weights_dtype(const std::string& text, const std::string& what) {
  if (text == "f32") return WeightsDType::F32;
  if (text == "bf16") return WeightsDType::BF16;
  if (text == "int8") return WeightsDType::Int8;
  fail(what, ": '", text,
       "' is not a weight format; use f32 (as trained), bf16 (bfloat16) or int8 (per-channel "
       "scales)");
}

const char* weights_dtype_name(WeightsDType dtype) {
  switch (dtype) {
    case WeightsDType::F32:
      return "f32";
    case WeightsDType::BF16:
      return "bf16";
    case WeightsDType::Int8:
      return "int8";
  }
  return "?";
}

}  // namespace autoshard
