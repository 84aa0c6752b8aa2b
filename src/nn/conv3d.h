// A 3-D convolution composed of 2-D ones (the Conv op has two spatial
// dims): Conv3D and ConvLSTM3D run it.
#pragma once

#include "autoshard/ir/ops.h"

namespace autoshard {

// x [batch, depth, rows, cols, in] * w [kd, kh, kw, in / groups, out] with
// `attrs`' three strides, dilations and pads (depth first): one Conv2D per
// depth tap of the kernel over the depth slices it reads, summed.
Value conv3d(Value x, Value w, const ConvAttrs& attrs);

}  // namespace autoshard
