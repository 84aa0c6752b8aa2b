// Keras's preprocessing layers as saved inside models: Normalization (its
// adapted statistics are weights), CenterCrop, Resizing, CategoryEncoding,
// Discretization, RandomCrop (with its training draws), and the other random
// augmentation layers, which change nothing in inference (Keras applies them
// in training only: BaseImagePreprocessingLayer.call in keras/src/layers/preprocessing/
// image_preprocessing/base_image_preprocessing_layer.py hands training=False
// to transform_images, which returns the images of these layers unchanged).
#include "autoshard/nn/preprocessing_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// Keras's `axis` (keras/src/layers/preprocessing/normalization.py,
// Normalization.__init__): an int, a list (Keras 2 saves its tuple as one),
// or null for one mean and variance over everything.
std::vector<int64_t> normalization_axes(LayerConfig& f) {
  if (f.null("axis")) {
    f.raw("axis");
    return {};
  }
  if (!f.has("axis")) return {-1};
  const json& a = f.raw("axis");
  if (a.is_number_integer()) return {a.get<int64_t>()};
  std::vector<int64_t> axes;
  if (!a.is_array()) f.bad("axis", a, "must be an integer, a list of integers or null");
  for (const json& e : a) {
    if (!e.is_number_integer()) f.bad("axis", a, "must be an integer, a list of integers or null");
    axes.push_back(e.get<int64_t>());
  }
  return axes;
}

// A given statistic (a number or nested lists of numbers), flattened.
void flatten_numbers(LayerConfig& f, const std::string& k, const json& v,
                     std::vector<double>& out) {
  if (v.is_number()) {
    out.push_back(v.get<double>());
  } else if (v.is_array()) {
    for (const json& e : v) flatten_numbers(f, k, e, out);
  } else {
    f.bad(k, v, "must be a number or (nested) lists of numbers");
  }
}

std::optional<std::vector<double>> given_statistic(LayerConfig& f, const std::string& k) {
  if (f.null(k)) f.raw(k);
  if (!f.has(k)) return std::nullopt;
  std::vector<double> values;
  flatten_numbers(f, k, f.raw(k), values);
  return values;
}

BuiltLayer keras_normalization(LayerConfig& f) {
  NormalizationOptions o;
  o.axes(normalization_axes(f)).invert(f.boolean("invert", false)).name(f.name());
  o.mean_ = given_statistic(f, "mean");
  o.variance_ = given_statistic(f, "variance");
  if (o.mean_.has_value() != o.variance_.has_value())
    f.bad(o.mean_ ? "variance" : "mean", nullptr, "comes with the other: give both or neither");
  // Adapted statistics are weights: Keras saves mean, variance and an int
  // count (vars/0..2, keras/src/layers/preprocessing/normalization.py,
  // Normalization.build; Keras 2's keras/layers/preprocessing/
  // normalization.py adds mean, variance and an int64 "count" in that order
  // and its update_state reads it): a counter, kept as the file has it.
  if (o.mean_) return {Normalization(o)};
  return {Normalization(o), plain_roles({"mean", "variance"}), {{"count", "vars/2", "count"}}};
}

BuiltLayer keras_center_crop(LayerConfig& f) {
  f.channels_last();
  return {CenterCrop(f.positive("height"), f.positive("width"), f.name())};
}

// Keras 3's Resizing config (resizing.py, get_config; Keras 2 and TF.js
// save height, width, interpolation and crop_to_aspect_ratio).
BuiltLayer keras_resizing(LayerConfig& f) {
  f.channels_last();
  const int64_t height = f.positive("height"), width = f.positive("width");
  const std::string interpolation = f.string("interpolation", "bilinear");
  if (interpolation != "bilinear" && interpolation != "nearest")
    f.bad("interpolation", interpolation, "is not supported (bilinear or nearest)");
  ResizingOptions o;
  o.nearest(interpolation == "nearest").name(f.name());
  o.crop_to_aspect_ratio(f.boolean("crop_to_aspect_ratio", false));
  o.pad_to_aspect_ratio(f.boolean("pad_to_aspect_ratio", false));
  if (o.crop_ && o.pad_)
    f.bad("pad_to_aspect_ratio", true, "excludes crop_to_aspect_ratio (Keras allows one)");
  f.expect("fill_mode", "constant", "is not supported (Keras pads with constant only)");
  o.fill_value(f.number("fill_value", 0.0));
  f.expect("antialias", false, "is not supported (resizing without antialiasing only)");
  return {Resizing(height, width, o)};
}

// keras/src/layers/preprocessing/category_encoding.py: output_mode
// "one_hot", "multi_hot" (its default; "binary" is its old name) or
// "count". `sparse` changes only how Keras holds the same numbers.
BuiltLayer keras_category_encoding(LayerConfig& f) {
  const int64_t tokens = f.positive("num_tokens");
  const std::string mode = f.string("output_mode", "multi_hot");
  CategoryOutput out = CategoryOutput::MultiHot;
  if (mode == "one_hot")
    out = CategoryOutput::OneHot;
  else if (mode == "count")
    out = CategoryOutput::Count;
  else if (mode != "multi_hot" && mode != "binary")
    f.bad("output_mode", mode, "is not supported (one_hot, multi_hot or count)");
  return {CategoryEncoding(tokens, out, f.name())};
}

// keras/src/layers/preprocessing/discretization.py: Keras 3 saves the
// boundaries in the config, adapted ones too (get_config; from_config sets
// them after num_bins), so num_bins and epsilon, which only adapt reads,
// change nothing here. Its int64 output comes out as f32 whole numbers.
BuiltLayer keras_discretization(LayerConfig& f) {
  f.expect("output_mode", "int", "is not supported (output_mode 'int' only)");
  if (!f.has("bin_boundaries"))
    f.bad("bin_boundaries", nullptr,
          "is missing: the layer's boundaries are not in its config (an unadapted layer, or "
          "Keras 2, which keeps adapted ones out of it); save it from Keras 3 after adapt, or "
          "give bin_boundaries");
  const json& b = f.raw("bin_boundaries");
  std::vector<double> bounds;
  if (!b.is_array()) f.bad("bin_boundaries", b, "must be a list of numbers");
  for (const json& e : b) {
    if (!e.is_number()) f.bad("bin_boundaries", b, "must be a list of numbers");
    bounds.push_back(e.get<double>());
  }
  f.integer("num_bins", 0);
  f.number("epsilon", 0.01);
  return {Discretization(bounds, f.name())};
}

// keras/src/layers/preprocessing/image_preprocessing/random_crop.py: Keras 3
// saves the seed it drew when none was given (make_default_seed); null
// (Keras 2, Python's unseeded layer): the draws are keyed by the layer's path.
BuiltLayer keras_random_crop(LayerConfig& f) {
  f.channels_last();
  std::optional<uint64_t> seed;
  if (f.has("seed")) {
    const json& s = f.raw("seed");
    if (!s.is_number_integer() || (!s.is_number_unsigned() && s.get<int64_t>() < 0))
      f.bad("seed", s, "must be an integer >= 0 or null");
    seed = s.get<uint64_t>();
  }
  return {RandomCrop(f.positive("height"), f.positive("width"), seed, f.name())};
}

}  // namespace

void add_preprocessing_layers(LayerTable& table) {
  table.add("Normalization", keras_normalization);
  table.add("CenterCrop", keras_center_crop);
  table.add("Resizing", keras_resizing);
  table.add("CategoryEncoding", keras_category_encoding);
  table.add("Discretization", keras_discretization);
  table.add("RandomCrop", keras_random_crop);
  for (const char* cls : {"RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation",
                          "RandomContrast", "RandomBrightness"})
    table.add(cls, [cls](LayerConfig& f) -> BuiltLayer {
      f.accept_remaining_fields();  // factors, modes and seeds act in training only
      return {InferencePassThrough(f.name(), cls)};
    });
}

}  // namespace autoshard::keras
