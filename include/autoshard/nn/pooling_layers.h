// Keras 3's pooling layers, channels last: MaxPooling1D/2D and
// AveragePooling1D/2D (one Pool op each: split over batch, channels or
// output rows with a halo), MaxPooling3D/AveragePooling3D (two Pool ops:
// each depth slice over rows and cols, then over depth), and the global
// poolings (GlobalAveragePooling1D/2D/3D a mean over the spatial dims,
// GlobalMaxPooling1D/2D/3D one window covering them). An average with
// padding "same" divides by the positions inside the input, as Keras.
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

struct PoolingOptions {
  // Empty: Keras's default (2 per spatial dim). One value: every dim.
  AUTOSHARD_OPTION(std::vector<int64_t>, pool_size, {})
  AUTOSHARD_OPTION(std::vector<int64_t>, strides, {})  // empty: pool_size
  AUTOSHARD_OPTION(std::string, padding, "valid")      // or "same"
  AUTOSHARD_OPTION(std::string, name, "")
};

class MaxPooling1D : public Layer {
 public:
  explicit MaxPooling1D(PoolingOptions options = {});
};
class MaxPooling2D : public Layer {
 public:
  explicit MaxPooling2D(PoolingOptions options = {});
};
class AveragePooling1D : public Layer {
 public:
  explicit AveragePooling1D(PoolingOptions options = {});
};
class AveragePooling2D : public Layer {
 public:
  explicit AveragePooling2D(PoolingOptions options = {});
};

// Over [batch, depth, rows, cols, channels].
class MaxPooling3D : public Layer {
 public:
  explicit MaxPooling3D(PoolingOptions options = {});
};
class AveragePooling3D : public Layer {
 public:
  explicit AveragePooling3D(PoolingOptions options = {});
};

struct GlobalPoolingOptions {
  AUTOSHARD_OPTION(bool, keepdims, false)  // true: the spatial dims stay, of extent 1
  AUTOSHARD_OPTION(std::string, name, "")
};

class GlobalAveragePooling1D : public Layer {
 public:
  explicit GlobalAveragePooling1D(GlobalPoolingOptions options = {});
};
class GlobalAveragePooling2D : public Layer {
 public:
  explicit GlobalAveragePooling2D(GlobalPoolingOptions options = {});
};
class GlobalMaxPooling1D : public Layer {
 public:
  explicit GlobalMaxPooling1D(GlobalPoolingOptions options = {});
};
class GlobalMaxPooling2D : public Layer {
 public:
  explicit GlobalMaxPooling2D(GlobalPoolingOptions options = {});
};

class GlobalAveragePooling3D : public Layer {
 public:
  explicit GlobalAveragePooling3D(GlobalPoolingOptions options = {});
};
class GlobalMaxPooling3D : public Layer {
 public:
  explicit GlobalMaxPooling3D(GlobalPoolingOptions options = {});
};

}  // namespace autoshard
