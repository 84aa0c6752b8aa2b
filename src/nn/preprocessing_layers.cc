#include "autoshard/nn/preprocessing_layers.h"

#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/trace.h"

namespace autoshard {

namespace {

constexpr double kStdFloor = 1e-7;  // keras.config.epsilon(): Normalization's floor of the std
constexpr int64_t kMostGivenValues = 4096;

Value only_input(const std::vector<Value>& inputs, const std::string& layer) {
  AS_CHECK(inputs.size() == 1, "layer ", layer, " takes one input, got ", inputs.size());
  AS_CHECK(inputs[0].rank() >= 1, "layer ", layer, " needs a batch dimension");
  return inputs[0];
}

// A constant of `shape` holding `values` (row-major). The graph's constants
// are single-valued, so each value is a one padded into its position; the
// count is bounded, and Keras's given statistics are short.
Value constant_of(Graph& g, const Shape& shape, const std::vector<double>& values) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (std::all_of(values.begin(), values.end(), [&](double v) { return v == values[0]; }))
    return ops::constant(g, shape, values[0]);
  Value sum;
  for (int64_t i = 0; i < n; ++i) {
    if (values[i] == 0) continue;
    Value one = ops::pad(ops::constant(g, {1}, values[i]), {i}, {n - 1 - i});
    sum = sum.valid() ? sum + one : one;
  }
  if (!sum.valid()) sum = ops::constant(g, {n}, 0.0);
  return ops::reshape(sum, shape);
}

class NormalizationImpl : public LayerImpl {
 public:
  explicit NormalizationImpl(NormalizationOptions o) : LayerImpl(o.name_), o_(std::move(o)) {
    AS_CHECK(o_.mean_.has_value() == o_.variance_.has_value(), "Normalization ", name(),
             ": give both mean and variance, or neither (and adapt it)");
    if (o_.mean_) {
      AS_CHECK(o_.mean_->size() == o_.variance_->size() && !o_.mean_->empty(), "Normalization ",
               name(), ": mean and variance must hold as many values, got ", o_.mean_->size(),
               " and ", o_.variance_->size());
      AS_CHECK(static_cast<int64_t>(o_.mean_->size()) <= kMostGivenValues, "Normalization ", name(),
               ": given statistics hold at most ", kMostGivenValues,
               " values here; adapt the layer instead (its statistics are then weights)");
      for (double v : *o_.variance_)
        AS_CHECK(std::isfinite(v) && v >= 0, "Normalization ", name(),
                 ": a variance must be finite and >= 0, got ", v);
      for (double v : *o_.mean_)
        AS_CHECK(std::isfinite(v), "Normalization ", name(), ": a mean must be finite");
    }
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = only_input(inputs, name());
    const int rank = x.rank();
    Shape stats, spread(rank, 1);  // the statistics' shape, and it broadcast over x
    for (int64_t a : kept_axes(x)) {
      stats.push_back(x.dim(static_cast<int>(a)));
      spread[a] = x.dim(static_cast<int>(a));
    }
    const int64_t count = numel(stats);
    Value mean, variance;
    if (o_.mean_) {
      const int64_t given = static_cast<int64_t>(o_.mean_->size());
      AS_CHECK(given == 1 || given == count, "Normalization ", name(), ": ", given,
               " given statistics do not fit the kept axes of shape ", shape_str(stats),
               " (one value, or one per position)");
      mean = constant_of(t.graph(), given == 1 ? Shape{} : stats, *o_.mean_);
      variance = constant_of(t.graph(), given == 1 ? Shape{} : stats, *o_.variance_);
      if (given == 1) spread.assign(rank, 1);
    } else {
      // Keras's order: mean, variance (then an int "count" nothing reads).
      mean = t.weight("mean", stats, Initializer::zeros(), false);
      variance = t.weight("variance", stats, Initializer::ones(), false);
    }
    mean = ops::reshape(mean, spread);
    Value root = ops::unary(ops::reshape(variance, spread), UnaryFn::Sqrt);
    Value floor = ops::constant(t.graph(), {}, kStdFloor);
    Value std = root + ops::relu(floor - root);  // max(sqrt(variance), 1e-7)
    return o_.invert_ ? mean + x * std : (x - mean) / std;
  }

  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  std::vector<int64_t> kept_axes(const Value& x) const {
    std::vector<int64_t> kept;
    for (int64_t a : o_.axes_) {
      const int64_t k = a < 0 ? a + x.rank() : a;
      AS_CHECK(k >= 1 && k < x.rank(), "Normalization ", name(), ": axis ", a,
               " is not a feature axis of an input of shape ", shape_str(x.shape()));
      kept.push_back(k);
    }
    std::sort(kept.begin(), kept.end());
    kept.erase(std::unique(kept.begin(), kept.end()), kept.end());
    return kept;
  }

  NormalizationOptions o_;
};

class CenterCropImpl : public LayerImpl {
 public:
  CenterCropImpl(int64_t height, int64_t width, std::string name)
      : LayerImpl(std::move(name)), height_(height), width_(width) {
    AS_CHECK(height > 0 && width > 0, "CenterCrop: height and width must be positive, got ", height,
             " and ", width);
  }

  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = only_input(inputs, name());
    AS_CHECK(x.rank() == 4, "CenterCrop ", name(),
             ": inputs must be images [batch, height, width, channels], got ",
             shape_str(x.shape()));
    const int64_t h = x.dim(1), w = x.dim(2);
    AS_CHECK(h >= height_ && w >= width_, "CenterCrop ", name(), ": images of ", h, "x", w,
             " are smaller than the crop ", height_, "x", width_,
             " (Keras resizes them first; add a Resizing layer before)");
    const int64_t top = (h - height_) / 2, left = (w - width_) / 2;
    return ops::pad(x, {0, -top, -left, 0}, {0, -(h - height_ - top), -(w - width_ - left), 0});
  }

 private:
  int64_t height_, width_;
};

class InferencePassThroughImpl : public LayerImpl {
 public:
  InferencePassThroughImpl(std::string name, std::string keras_class)
      : LayerImpl(std::move(name)), keras_class_(std::move(keras_class)) {}

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(!t.training(), keras_class_, " layer '", name(),
             "' draws random augmentations in training, which this reader does not build: "
             "train the model from Python (autoshard.keras.models.load_model), or predict "
             "and evaluate here");
    return only_input(inputs, name());
  }

  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  std::string keras_class_;
};

}  // namespace

Normalization::Normalization(NormalizationOptions options)
    : Layer(std::make_shared<NormalizationImpl>(
          (options.name_ = layer_name_or_default(options.name_, "normalization"),
           std::move(options)))) {}

CenterCrop::CenterCrop(int64_t height, int64_t width, std::string name)
    : Layer(std::make_shared<CenterCropImpl>(height, width,
                                             layer_name_or_default(name, "center_crop"))) {}

InferencePassThrough::InferencePassThrough(std::string name, std::string keras_class)
    : Layer(std::make_shared<InferencePassThroughImpl>(std::move(name), std::move(keras_class))) {}

}  // namespace autoshard
