// Keras's convolution layers: Conv1D, Conv2D, Conv3D, Conv2DTranspose,
// DepthwiseConv2D and SeparableConv2D (channels_last). The plain ones share
// keras/src/layers/convolutional/base_conv.py (BaseConv.__init__: filters,
// kernel_size, strides, padding, data_format, dilation_rate, groups,
// activation, use_bias, the kernel's and bias's initializers, regularizers
// and constraints); conv3d.py's Conv3D adds nothing to it.
#include "autoshard/nn/conv_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

namespace {

// What every convolution shares: strides, padding, dilation, activation, bias.
ConvOptions keras_conv_options(LayerConfig& f, size_t rank) {
  f.channels_last();
  ConvOptions o;
  o.strides(f.sizes("strides", rank, std::vector<int64_t>(rank, 1)));
  const std::string padding = f.string("padding", "valid");
  if (padding != "valid" && padding != "same" && !(padding == "causal" && rank == 1))
    f.bad("padding", padding, "is not supported (valid or same; causal for Conv1D)");
  o.padding(padding);
  o.dilation_rate(f.sizes("dilation_rate", rank, std::vector<int64_t>(rank, 1)));
  o.activation(f.activation_name("activation"));
  o.use_bias(f.boolean("use_bias", true)).name(f.name());
  o.kernel_initializer(f.initializer_or("kernel_initializer", Initializer::glorot_uniform()));
  o.bias_initializer(f.initializer_or("bias_initializer", Initializer::zeros()));
  return o;
}

std::vector<int64_t> keras_kernel_size(LayerConfig& f, size_t rank) {
  const std::vector<int64_t> kernel = f.sizes("kernel_size", rank, {});
  if (kernel.empty()) f.bad("kernel_size", nullptr, "is required");
  f.weight_extras({"kernel", "bias", "depthwise", "pointwise"});
  return kernel;
}

// The roles of weights `cpp` (TF.js's names `tfjs`), then the bias if any.
std::vector<WeightRole> keras_conv_roles(const ConvOptions& o, std::vector<std::string> cpp,
                                         std::vector<std::string> tfjs) {
  if (o.use_bias_) {
    cpp.push_back("bias");
    tfjs.push_back("bias");
  }
  std::vector<WeightRole> roles;
  for (size_t i = 0; i < cpp.size(); ++i)
    roles.push_back({cpp[i], "vars/" + std::to_string(i), tfjs[i]});
  return roles;
}

BuiltLayer keras_conv(LayerConfig& f, size_t rank) {
  ConvOptions o = keras_conv_options(f, rank);
  const std::vector<int64_t> kernel = keras_kernel_size(f, rank);
  o.groups(f.positive("groups", 1));
  const int64_t filters = f.positive("filters");
  const std::vector<WeightRole> roles = keras_conv_roles(o, {"kernel"}, {"kernel"});
  if (rank == 1) return {Conv1D(filters, kernel[0], o), roles};
  if (rank == 3) return {Conv3D(filters, kernel, o), roles};
  return {Conv2D(filters, kernel, o), roles};
}

BuiltLayer keras_conv2d_transpose(LayerConfig& f) {
  ConvOptions o = keras_conv_options(f, 2);
  const std::vector<int64_t> kernel = keras_kernel_size(f, 2);
  f.expect("output_padding", nullptr, "is not supported");
  f.expect("groups", 1);
  const int64_t filters = f.positive("filters");
  return {Conv2DTranspose(filters, kernel, o), keras_conv_roles(o, {"kernel"}, {"kernel"})};
}

BuiltLayer keras_depthwise_conv2d(LayerConfig& f) {
  ConvOptions o = keras_conv_options(f, 2);
  const std::vector<int64_t> kernel = keras_kernel_size(f, 2);
  o.depth_multiplier(f.positive("depth_multiplier", 1));
  f.expect("filters", nullptr);
  return {DepthwiseConv2D(kernel, o), keras_conv_roles(o, {"kernel"}, {"depthwise_kernel"})};
}

BuiltLayer keras_separable_conv2d(LayerConfig& f) {
  ConvOptions o = keras_conv_options(f, 2);
  const std::vector<int64_t> kernel = keras_kernel_size(f, 2);
  o.depth_multiplier(f.positive("depth_multiplier", 1));
  const int64_t filters = f.positive("filters");
  return {SeparableConv2D(filters, kernel, o),
          keras_conv_roles(o, {"depthwise_kernel", "pointwise_kernel"},
                           {"depthwise_kernel", "pointwise_kernel"})};
}

}  // namespace

void add_conv_layers(LayerTable& table) {
  table.add("Conv1D", [](LayerConfig& f) { return keras_conv(f, 1); });
  table.add("Conv2D", [](LayerConfig& f) { return keras_conv(f, 2); });
  table.add("Conv3D", [](LayerConfig& f) { return keras_conv(f, 3); });
  table.add("Conv2DTranspose", keras_conv2d_transpose);
  table.add("DepthwiseConv2D", keras_depthwise_conv2d);
  table.add("SeparableConv2D", keras_separable_conv2d);
}

}  // namespace autoshard::keras
