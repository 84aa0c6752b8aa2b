// Keras 3's convolution layers, channels last (data_format "channels_last"):
// Conv1D, Conv2D, Conv3D, DepthwiseConv2D, SeparableConv2D, Conv2DTranspose.
// Each is one Conv op (src/ir/ops/vision.cc) plus its bias and activation, so
// the planner can split it over batch, output channels, input channels
// (partial sums) or its output rows (a band per device with a halo from the
// neighbours). Conv3D is composed of the same op: one Conv2D per tap of its
// kernel's depth, over the input's depth slices that tap reads (as batch
// rows), summed.
//
// Weights as Keras names and shapes them: Conv1D/2D/3D "kernel" [*kernel_size,
// in / groups, filters] and "bias" [filters]; DepthwiseConv2D "kernel" [kh, kw,
// in, depth_multiplier]; SeparableConv2D "depthwise_kernel" [kh, kw, in,
// depth_multiplier], "pointwise_kernel" [1, 1, in * depth_multiplier, filters];
// Conv2DTranspose "kernel" [kh, kw, filters, in].
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

// Options of every convolution layer. Sizes given as one value apply to
// every spatial dim (Keras's int form).
struct ConvOptions {
  AUTOSHARD_OPTION(std::vector<int64_t>, strides, {1})
  // "valid" (no padding), "same" (the output has ceil(in / stride) positions,
  // the odd zero after, as TensorFlow), Conv1D also "causal" (zeros before only).
  AUTOSHARD_OPTION(std::string, padding, "valid")
  AUTOSHARD_OPTION(std::vector<int64_t>, dilation_rate, {1})
  AUTOSHARD_OPTION(int64_t, groups, 1)  // Conv1D, Conv2D, Conv3D
  // DepthwiseConv2D, SeparableConv2D: output channels per input channel.
  AUTOSHARD_OPTION(int64_t, depth_multiplier, 1)
  AUTOSHARD_OPTION(std::string, activation, "")
  AUTOSHARD_OPTION(bool, use_bias, true)
  // kernel_initializer is also DepthwiseConv2D's and SeparableConv2D's
  // depthwise_initializer; pointwise_initializer is SeparableConv2D's.
  AUTOSHARD_OPTION(Initializer, kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(Initializer, pointwise_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(Initializer, bias_initializer, Initializer::zeros())
  AUTOSHARD_OPTION(std::string, name, "")
};

// keras.layers.Conv1D over [batch, steps, channels].
class Conv1D : public Layer {
 public:
  Conv1D(int64_t filters, int64_t kernel_size, ConvOptions options = {});
};

// keras.layers.Conv2D over [batch, rows, cols, channels].
class Conv2D : public Layer {
 public:
  // kernel_size: {rows, cols} or one value for both.
  Conv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions options = {});
};

// keras.layers.Conv3D over [batch, depth, rows, cols, channels].
class Conv3D : public Layer {
 public:
  // kernel_size: {depth, rows, cols} or one value for all three.
  Conv3D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions options = {});
};

// keras.layers.DepthwiseConv2D: each input channel convolved with its own
// depth_multiplier kernels (output channel c * depth_multiplier + m).
class DepthwiseConv2D : public Layer {
 public:
  explicit DepthwiseConv2D(std::vector<int64_t> kernel_size, ConvOptions options = {});
};

// keras.layers.SeparableConv2D: a depthwise convolution, then a 1x1
// convolution to `filters` channels, then the bias.
class SeparableConv2D : public Layer {
 public:
  SeparableConv2D(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions options = {});
};

// keras.layers.Conv2DTranspose: the gradient of a Conv2D with respect to its
// input, as a layer. Output rows: "valid" (in - 1) * stride + dilated kernel,
// "same" in * stride.
class Conv2DTranspose : public Layer {
 public:
  Conv2DTranspose(int64_t filters, std::vector<int64_t> kernel_size, ConvOptions options = {});
};

}  // namespace autoshard
