// Keras's pooling layers: MaxPooling1D/2D/3D, AveragePooling1D/2D/3D and
// their Global forms (channels_last). keras/src/layers/pooling/
// base_pooling.py (BasePooling.__init__: pool_size, strides (None: the pool
// size), padding, data_format) and base_global_pooling.py (keepdims).
#include "autoshard/nn/pooling_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

namespace {

PoolingOptions keras_pooling_options(LayerConfig& f, size_t rank) {
  f.channels_last();
  PoolingOptions o;
  o.pool_size(f.sizes("pool_size", rank, std::vector<int64_t>(rank, 2)));
  o.strides(f.sizes("strides", rank, o.pool_size_));
  const std::string padding = f.string("padding", "valid");
  if (padding != "valid" && padding != "same") f.bad("padding", padding, "is not supported");
  o.padding(padding).name(f.name());
  return o;
}

GlobalPoolingOptions keras_global_pooling_options(LayerConfig& f) {
  f.channels_last();
  GlobalPoolingOptions o;
  o.keepdims(f.boolean("keepdims", false)).name(f.name());
  return o;
}

}  // namespace

void add_pooling_layers(LayerTable& table) {
  table.add("MaxPooling1D", [](LayerConfig& f) -> BuiltLayer {
    return {MaxPooling1D(keras_pooling_options(f, 1))};
  });
  table.add("MaxPooling2D", [](LayerConfig& f) -> BuiltLayer {
    return {MaxPooling2D(keras_pooling_options(f, 2))};
  });
  table.add("AveragePooling1D", [](LayerConfig& f) -> BuiltLayer {
    return {AveragePooling1D(keras_pooling_options(f, 1))};
  });
  table.add("AveragePooling2D", [](LayerConfig& f) -> BuiltLayer {
    return {AveragePooling2D(keras_pooling_options(f, 2))};
  });
  table.add("MaxPooling3D", [](LayerConfig& f) -> BuiltLayer {
    return {MaxPooling3D(keras_pooling_options(f, 3))};
  });
  table.add("AveragePooling3D", [](LayerConfig& f) -> BuiltLayer {
    return {AveragePooling3D(keras_pooling_options(f, 3))};
  });
  table.add("GlobalAveragePooling3D", [](LayerConfig& f) -> BuiltLayer {
    return {GlobalAveragePooling3D(keras_global_pooling_options(f))};
  });
  table.add("GlobalMaxPooling3D", [](LayerConfig& f) -> BuiltLayer {
    return {GlobalMaxPooling3D(keras_global_pooling_options(f))};
  });
  table.add("GlobalAveragePooling1D", [](LayerConfig& f) -> BuiltLayer {
    return {GlobalAveragePooling1D(keras_global_pooling_options(f))};
  });
  table.add("GlobalAveragePooling2D", [](LayerConfig& f) -> BuiltLayer {
    return {GlobalAveragePooling2D(keras_global_pooling_options(f))};
  });
  table.add("GlobalMaxPooling1D", [](LayerConfig& f) -> BuiltLayer {
    return {GlobalMaxPooling1D(keras_global_pooling_options(f))};
  });
  table.add("GlobalMaxPooling2D", [](LayerConfig& f) -> BuiltLayer {
    return {GlobalMaxPooling2D(keras_global_pooling_options(f))};
  });
}

}  // namespace autoshard::keras
