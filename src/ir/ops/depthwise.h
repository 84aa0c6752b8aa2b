// Depthwise convolutions (DepthwiseConv2D and SeparableConv2D's first half
// with a depth multiplier of 1, Conv1D/2D with groups = channels): each
// channel convolved with its own kernel. There is no sum over channels for
// a GEMM to do, so these kernels run each tap as one vector operation over
// the channels (channels last: contiguous in x, y and w) instead of the
// plain loop's per-channel lookup of its group
// (vision_kernels.h's *_reference, which the tests compare them to).
#pragma once

#include "ir/ops/vision_kernels.h"

namespace autoshard {

// Whether g (with `offset`, the local first channel's global index) is a
// depthwise convolution of multiplier 1 holding all its channels: groups =
// cin = cout, one input channel per group.
bool depthwise_suits(const ConvGeometry& g, int64_t offset);

// y [batch, out_h, out_w, C] = x [batch, in_h, in_w, C] convolved channel by
// channel with w [k_h, k_w, 1, C], zeros outside x; as conv_forward.
void depthwise_forward(const ConvGeometry& g, const float* x, const float* w, float* y);

// dx from dy and w: each tap's dy times w, added at the input position it
// read.
void depthwise_backward_input(const ConvGeometry& g, const float* dy, const float* w, float* dx);

// dw [k_h, k_w, 1, C] from x and dy, each element summed over the batch and
// the positions in the plain loop's order, (tap, block of channels) pairs
// on the cores.
void depthwise_backward_filter(const ConvGeometry& g, const float* x, const float* dy, float* dw);

}  // namespace autoshard
