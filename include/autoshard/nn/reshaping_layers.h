// Keras's reshaping layers (Flatten, Reshape, Permute, RepeatVector) and
// Rescaling. Shapes given to them exclude the batch dimension, as in Keras.
// None has weights.
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

// [batch, d1, d2, ...] -> [batch, d1 * d2 * ...].
class Flatten : public Layer {
 public:
  explicit Flatten(std::string name = "");
};

// [batch, ...] -> [batch, target_shape...]; one entry may be -1 (inferred).
class Reshape : public Layer {
 public:
  explicit Reshape(Shape target_shape, std::string name = "");
};

// Permutes the dimensions after the batch: `dims` is a permutation of 1..n
// (Keras's 1-based indices), e.g. Permute({2, 1}) swaps the two axes of
// [batch, a, b].
class Permute : public Layer {
 public:
  explicit Permute(std::vector<int64_t> dims, std::string name = "");
};

// [batch, features] -> [batch, n, features].
class RepeatVector : public Layer {
 public:
  explicit RepeatVector(int64_t n, std::string name = "");
};

// x * scale + offset (e.g. Rescaling(1.0 / 255) for pixels).
class Rescaling : public Layer {
 public:
  explicit Rescaling(double scale, double offset = 0.0, std::string name = "");
};

}  // namespace autoshard
