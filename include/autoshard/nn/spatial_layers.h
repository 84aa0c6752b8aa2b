// Keras 3's image reshaping layers, channels last [batch, rows, cols,
// channels]: ZeroPadding2D and Cropping2D (one Pad op: negative padding
// crops), UpSampling2D with nearest neighbours (a broadcast between two
// free reshapes, so its gradient is a sum).
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

}  // namespace autoshard
