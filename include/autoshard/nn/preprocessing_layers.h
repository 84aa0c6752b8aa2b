// Keras's preprocessing layers as they appear inside saved models:
// Normalization, CenterCrop, and the random augmentation layers
// (RandomFlip, RandomRotation, ...) in inference. The Keras file readers
// build them through the layer table (io/keras/layers/preprocessing.cc), so
// `autoshard predict` and `evaluate` run models that hold them.
//
//   Normalization(NormalizationOptions().axes({-1}))  // adapted: weights "mean", "variance"
//   Normalization(NormalizationOptions().mean({3}).variance({2}))  // given: constants
//   CenterCrop(24, 24)
//   InferencePassThrough("random_flip", "RandomFlip")
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "autoshard/nn/layers.h"

namespace autoshard {

struct NormalizationOptions {
  // The kept axes (Keras's `axis`: -1 by default; empty: one mean and
  // variance over everything). The batch axis cannot be kept.
  NormalizationOptions& axes(std::vector<int64_t> v) {
    axes_ = std::move(v);
    return *this;
  }
  // Given statistics (Keras's `mean=`, `variance=`): one value each, or one
  // per position of the kept axes (row-major). Absent: the layer holds
  // them as non-trainable weights "mean" and "variance" (set by Keras's
  // adapt and read from the file).
  NormalizationOptions& mean(std::vector<double> v) {
    mean_ = std::move(v);
    return *this;
  }
  NormalizationOptions& variance(std::vector<double> v) {
    variance_ = std::move(v);
    return *this;
  }
  // Maps normalized values back: mean + x * std.
  NormalizationOptions& invert(bool v) {
    invert_ = v;
    return *this;
  }
  NormalizationOptions& name(std::string v) {
    name_ = std::move(v);
    return *this;
  }

  std::vector<int64_t> axes_ = {-1};
  std::optional<std::vector<double>> mean_, variance_;
  bool invert_ = false;
  std::string name_;
};

// Keras's Normalization (keras/src/layers/preprocessing/normalization.py):
// (x - mean) / max(sqrt(variance), 1e-7) with the statistics broadcast over
// the axes not kept. A mask passes through.
class Normalization : public Layer {
 public:
  explicit Normalization(NormalizationOptions options = {});
};

// Keras's CenterCrop (keras/src/layers/preprocessing/image_preprocessing/
// center_crop.py): [b, h, w, c] -> the central [b, height, width, c]
// window, starting at ((h - height) / 2, (w - width) / 2). Images smaller
// than the window (which Keras resizes first) are refused.
class CenterCrop : public Layer {
 public:
  CenterCrop(int64_t height, int64_t width, std::string name = "");
};

// A Keras layer that changes nothing in inference (the random augmentation
// layers: Keras applies them only in training). Traced for training it
// refuses, naming `keras_class`: its draws are built by Python's
// autoshard.keras, which trains models holding it.
class InferencePassThrough : public Layer {
 public:
  InferencePassThrough(std::string name, std::string keras_class);
};

}  // namespace autoshard
