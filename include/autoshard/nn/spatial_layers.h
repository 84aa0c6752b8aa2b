// Keras 3's image and volume reshaping layers, channels last ([batch, rows,
// cols, channels]; the 3-D ones [batch, depth, rows, cols, channels]):
// ZeroPadding2D/3D and Cropping2D/3D (one Pad op: negative padding crops),
// UpSampling2D/3D with nearest neighbours (a broadcast between two free
// reshapes, so its gradient is a sum).
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

// Keras's ((top, bottom), (left, right)) as {top, bottom, left, right}; one
// value pads all four sides, two values pad rows and cols symmetrically.
class ZeroPadding2D : public Layer {
 public:
  explicit ZeroPadding2D(std::vector<int64_t> padding = {1}, std::string name = "");
};

// Removes rows and cols, given as ZeroPadding2D's padding.
class Cropping2D : public Layer {
 public:
  explicit Cropping2D(std::vector<int64_t> cropping = {0}, std::string name = "");
};

// Repeats each row size[0] times and each col size[1] times (one value: both).
class UpSampling2D : public Layer {
 public:
  explicit UpSampling2D(std::vector<int64_t> size = {2}, std::string interpolation = "nearest",
                        std::string name = "");
};

// Keras's ((d0, d1), (top, bottom), (left, right)) as {d0, d1, top, bottom,
// left, right}; one value pads all six sides, three values pad each dim
// symmetrically.
class ZeroPadding3D : public Layer {
 public:
  explicit ZeroPadding3D(std::vector<int64_t> padding = {1}, std::string name = "");
};

// Removes depth slices, rows and cols, given as ZeroPadding3D's padding.
class Cropping3D : public Layer {
 public:
  explicit Cropping3D(std::vector<int64_t> cropping = {1}, std::string name = "");
};

// Repeats each depth slice size[0] times, each row size[1] times and each
// col size[2] times (one value: all three).
class UpSampling3D : public Layer {
 public:
  explicit UpSampling3D(std::vector<int64_t> size = {2}, std::string interpolation = "nearest",
                        std::string name = "");
};

}  // namespace autoshard
