// Keras's preprocessing layers as saved inside models: Normalization (its
// adapted statistics are weights), CenterCrop, and the random augmentation
// layers, which change nothing in inference (Keras applies them in training
// only: BaseImagePreprocessingLayer.call in keras/src/layers/preprocessing/
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

}  // namespace

void add_preprocessing_layers(LayerTable& table) {
  table.add("Normalization", keras_normalization);
  table.add("CenterCrop", keras_center_crop);
  for (const char* cls : {"RandomFlip", "RandomRotation", "RandomZoom", "RandomTranslation",
                          "RandomContrast", "RandomBrightness"})
    table.add(cls, [cls](LayerConfig& f) -> BuiltLayer {
      f.accept_remaining_fields();  // factors, modes and seeds act in training only
      return {InferencePassThrough(f.name(), cls)};
    });
}

}  // namespace autoshard::keras
