// Moving values between an autoshard weight and its Keras variable
// (keras_hub.h's split and perm): a device's block read as the few
// hyperslabs of the variable that hold it, and a whole weight turned back
// into the variable's layout for writing.
#pragma once

#include <functional>
#include <vector>

#include "autoshard/io/keras_hub.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard::keras_hub {

// Reads the block [offset, offset + count) of the Keras variable, row-major.
using HyperslabRead =
    std::function<void(const std::vector<int64_t>& offset, const Shape& count, float* dst)>;

// The weight's block [lo, lo + n) (weight coordinates), read through `read`
// one contiguous run per index of the outer factors it cuts (a split of kv
// heads reads one run per kv head); rows outside the variable (row_offset)
// are zeros.
Tensor read_weight_block(const Variable& v, const std::vector<int64_t>& lo, const Shape& n,
                         const HyperslabRead& read);

// The whole weight laid out as the Keras variable (rows outside it dropped).
Tensor keras_value(const Variable& v, const Tensor& weight);
// The inverse: the whole weight from the Keras variable's value.
Tensor weight_value(const Variable& v, const Tensor& keras);

}  // namespace autoshard::keras_hub
