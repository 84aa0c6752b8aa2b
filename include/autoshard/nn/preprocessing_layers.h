// Keras's preprocessing layers as they appear inside saved models:
// Normalization, CenterCrop, Resizing, CategoryEncoding, Discretization,
// RandomCrop, and the other random augmentation layers (RandomFlip, RandomRotation, ...) in
// inference. The Keras file readers build them through the layer table
// (io/keras/layers/preprocessing.cc), so `autoshard predict` and `evaluate`
// run models that hold them; Python's autoshard.keras builds its classes of
// these names through the same table.
//
//   Normalization(NormalizationOptions().axes({-1}))  // adapted: weights "mean", "variance"
//   Normalization(NormalizationOptions().mean({3}).variance({2}))  // given: constants
//   CenterCrop(24, 24)
//   Resizing(32, 32, ResizingOptions().nearest(true))
//   CategoryEncoding(10, CategoryOutput::OneHot)
//   Discretization({0.0, 1.0, 2.5})
//   RandomCrop(24, 24, 7)
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

struct ResizingOptions {
  // Keras's interpolation "nearest" (default "bilinear").
  ResizingOptions& nearest(bool v) {
    nearest_ = v;
    return *this;
  }
  // Keras's crop_to_aspect_ratio: first the largest central window of the
  // target's aspect ratio.
  ResizingOptions& crop_to_aspect_ratio(bool v) {
    crop_ = v;
    return *this;
  }
  // Keras's pad_to_aspect_ratio: first `fill_value` rows (or columns) on
  // both sides up to the target's aspect ratio.
  ResizingOptions& pad_to_aspect_ratio(bool v) {
    pad_ = v;
    return *this;
  }
  ResizingOptions& fill_value(double v) {
    fill_value_ = v;
    return *this;
  }
  ResizingOptions& name(std::string v) {
    name_ = std::move(v);
    return *this;
  }

  bool nearest_ = false, crop_ = false, pad_ = false;
  double fill_value_ = 0;
  std::string name_;
};

// Keras's Resizing (keras/src/layers/preprocessing/image_preprocessing/
// resizing.py): [b, h, w, c] -> [b, height, width, c] with half-pixel
// centres and no antialiasing (ops::resize), after the optional crop or pad
// to the target's aspect ratio (keras.ops.image.resize). Linear: gradients
// flow through it.
class Resizing : public Layer {
 public:
  Resizing(int64_t height, int64_t width, ResizingOptions options = {});
};

// Keras's CategoryEncoding output_mode.
enum class CategoryOutput { OneHot, MultiHot, Count };

// Keras's CategoryEncoding (keras/src/layers/preprocessing/
// category_encoding.py, numerical_utils.encode_categorical_inputs): ids in
// [0, num_tokens) to f32 vectors of num_tokens. OneHot encodes each id (a
// trailing axis of 1 is replaced); MultiHot and Count take [batch, ids] and
// give per example 1 where an id occurs, or how often. i32 ids outside the
// range are an error when the step runs (as Keras raises); f32 ids (a value
// computed in the model) encode as zeros there.
class CategoryEncoding : public Layer {
 public:
  CategoryEncoding(int64_t num_tokens, CategoryOutput mode = CategoryOutput::MultiHot,
                   std::string name = "");
};

// Keras's Discretization with bin_boundaries, output_mode "int"
// (keras/src/layers/preprocessing/discretization.py): each value's bucket,
// the count of boundaries at or below it (numpy.digitize), as f32 whole
// numbers (Keras: int64). Boundaries must not decrease.
class Discretization : public Layer {
 public:
  explicit Discretization(std::vector<double> bin_boundaries, std::string name = "");
};

// Keras's RandomCrop (keras/src/layers/preprocessing/image_preprocessing/
// random_crop.py): in training one height x width window for the whole
// batch, at a top-left corner drawn uniformly each step; in inference the
// largest central window of the target's aspect ratio, resized bilinearly
// to height x width (keras/src/utils/image_utils.py, smart_resize, which
// Keras 2 and Keras 3 before 3.6 apply; 3.6's transform_images returns the
// images whole, against its own compute_output_shape). The draws come from
// the engine's keyed dropout bits, keyed by `seed` (unseeded: the layer's
// path), the model's seed, the step and nothing else, so every mesh draws
// the same windows (not Keras's own draws: no two frameworks share a
// generator). Training on images smaller than the window is refused.
class RandomCrop : public Layer {
 public:
  RandomCrop(int64_t height, int64_t width, std::optional<uint64_t> seed = std::nullopt,
             std::string name = "");
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
