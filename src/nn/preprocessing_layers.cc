#include "autoshard/nn/preprocessing_layers.h"

#include <algorithm>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/masking.h"
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

Value image_input(const std::vector<Value>& inputs, const std::string& cls,
                  const std::string& layer) {
  Value x = only_input(inputs, layer);
  AS_CHECK(x.rank() == 4 && x.dtype() == DType::F32, cls, " ", layer,
           ": inputs must be f32 images [batch, height, width, channels], got ",
           shape_str(x.shape()));
  return x;
}

// x resized to height x width, each axis only when its size changes (a
// resize to the same size is the identity).
Value resize_image(Value x, int64_t height, int64_t width, bool nearest) {
  if (x.dim(1) != height) x = ops::resize(x, 1, height, nearest);
  if (x.dim(2) != width) x = ops::resize(x, 2, width, nearest);
  return x;
}

// The largest central window of the aspect ratio height:width, as Keras
// computes it (keras/src/backend/numpy/image.py, resize with
// crop_to_aspect_ratio; keras/src/utils/image_utils.py, smart_resize).
Value crop_to_aspect(Value x, int64_t height, int64_t width) {
  const int64_t h = x.dim(1), w = x.dim(2);
  const int64_t ch = std::max<int64_t>(
      std::min<int64_t>(h, static_cast<int64_t>(double(w * height) / double(width))), 1);
  const int64_t cw = std::max<int64_t>(
      std::min<int64_t>(w, static_cast<int64_t>(double(h * width) / double(height))), 1);
  const int64_t top = (h - ch) / 2, left = (w - cw) / 2;
  return ops::pad(x, {0, -top, -left, 0}, {0, -(h - ch - top), -(w - cw - left), 0});
}

// Keras's pad_to_aspect_ratio (the same resize): fill rows above and below,
// or else columns left and right, as many on each side.
Value pad_to_aspect(Value x, int64_t height, int64_t width, double fill) {
  const int64_t h = x.dim(1), w = x.dim(2);
  const int64_t ph = std::max<int64_t>(h, static_cast<int64_t>(double(w * height) / double(width)));
  const int64_t pw = std::max<int64_t>(w, static_cast<int64_t>(double(h * width) / double(height)));
  const int64_t top = (ph - h) / 2, left = (pw - w) / 2;
  std::vector<int64_t> edge{0, 0, 0, 0};
  if (top > 0)
    edge[1] = top;
  else if (left > 0)
    edge[2] = left;
  else
    return x;
  if (fill == 0) return ops::pad(x, edge, edge);
  // The padding holds fill: pad(x) + fill * (1 - pad(ones)), so that the
  // image's own values come through exactly ((x - f) + f would round them).
  Graph& g = *x.graph;
  const Value border =
      ops::constant(g, {}, 1.0) - ops::pad(ops::constant(g, x.shape(), 1.0), edge, edge);
  return ops::pad(x, edge, edge) + border * ops::constant(g, {}, fill);
}

class ResizingImpl : public LayerImpl {
 public:
  ResizingImpl(int64_t height, int64_t width, ResizingOptions o)
      : LayerImpl(o.name_), height_(height), width_(width), o_(std::move(o)) {
    AS_CHECK(height > 0 && width > 0, "Resizing: height and width must be positive, got ", height,
             " and ", width);
    AS_CHECK(!(o_.crop_ && o_.pad_), "Resizing ", name(),
             ": crop_to_aspect_ratio and pad_to_aspect_ratio exclude each other");
    AS_CHECK(std::isfinite(o_.fill_value_), "Resizing ", name(), ": fill_value must be finite");
  }

  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = image_input(inputs, "Resizing", name());
    if (o_.crop_) x = crop_to_aspect(x, height_, width_);
    if (o_.pad_) x = pad_to_aspect(x, height_, width_, o_.fill_value_);
    return resize_image(x, height_, width_, o_.nearest_);
  }

 private:
  int64_t height_, width_;
  ResizingOptions o_;
};

// Float positions 0, 1, ..., n - 1, doubled up from [0] (each step appends
// the positions so far shifted by their count): exact in f32, log2(n) steps.
Value positions(Graph& g, int64_t n) {
  Value p = ops::constant(g, {1}, 0.0);
  int64_t have = 1;
  while (have < n) {
    p = ops::pad(p, {0}, {have}) + ops::pad(p + ops::constant(g, {}, double(have)), {have}, {0});
    have *= 2;
  }
  return have == n ? p : ops::pad(p, {0}, {n - have});
}

// 1 where a == b (f32 whole numbers), else 0; no gradient.
Value equal_to(Value a, Value b) {
  return ops::constant(*a.graph, {}, 1.0) - positive(ops::unary(a - b, UnaryFn::Abs));
}

class CategoryEncodingImpl : public LayerImpl {
 public:
  CategoryEncodingImpl(int64_t num_tokens, CategoryOutput mode, std::string name)
      : LayerImpl(std::move(name)), n_(num_tokens), mode_(mode) {
    AS_CHECK(num_tokens > 0, "CategoryEncoding: num_tokens must be positive, got ", num_tokens);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = only_input(inputs, name());
    Shape ids = x.shape();
    // Keras's one_hot replaces a trailing axis of 1; multi_hot and count
    // sum over the ids of an example (numerical_utils.encode_categorical_inputs).
    if (mode_ == CategoryOutput::OneHot) {
      if (ids.size() > 1 && ids.back() == 1) ids.pop_back();
    } else {
      AS_CHECK(x.rank() == 2, "CategoryEncoding ", name(),
               ": multi_hot and count take [batch, ids] inputs, got ", shape_str(x.shape()));
    }
    Value pos = positions(t.graph(), n_);
    Shape column = ids;
    column.push_back(1);
    // i32 ids read their position (the gather checks the range); f32 ones
    // are compared as they are.
    Value id = x.dtype() == DType::I32
                   ? ops::gather(ops::reshape(pos, {n_, 1}), ops::reshape(x, ids))
                   : ops::reshape(x, column);
    Value hot = equal_to(id, pos);  // [..., num_tokens]
    if (mode_ == CategoryOutput::OneHot) return hot;
    Value count = ops::reduce_sum(hot, {1});
    return mode_ == CategoryOutput::Count ? count : positive(count);
  }

 private:
  int64_t n_;
  CategoryOutput mode_;
};

class DiscretizationImpl : public LayerImpl {
 public:
  DiscretizationImpl(std::vector<double> bounds, std::string name)
      : LayerImpl(std::move(name)), bounds_(std::move(bounds)) {
    AS_CHECK(static_cast<int64_t>(bounds_.size()) <= kMostGivenValues, "Discretization ",
             this->name(), ": at most ", kMostGivenValues, " bin_boundaries here, got ",
             bounds_.size());
    for (size_t i = 0; i < bounds_.size(); ++i) {
      AS_CHECK(!std::isnan(bounds_[i]), "Discretization ", this->name(), ": a bin boundary is NaN");
      AS_CHECK(i == 0 || bounds_[i - 1] <= bounds_[i], "Discretization ", this->name(),
               ": bin_boundaries must increase (sorted ascending), got ", bounds_[i - 1],
               " before ", bounds_[i]);
    }
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = only_input(inputs, name());
    AS_CHECK(x.dtype() == DType::F32, "Discretization ", name(),
             " takes float inputs (Keras casts them to float32): give it an f32 input");
    if (bounds_.empty()) return ops::constant(t.graph(), x.shape(), 0.0);
    // bucket = #{k : x >= b_k} = n - #{k : b_k > x} (numpy.digitize, right=False).
    const int64_t n = static_cast<int64_t>(bounds_.size());
    Shape column = x.shape();
    column.push_back(1);
    Value above = positive(constant_of(t.graph(), {n}, bounds_) - ops::reshape(x, column));
    return ops::constant(t.graph(), {}, double(n)) -
           ops::reduce_sum(above, {static_cast<int64_t>(x.rank())});
  }

 private:
  std::vector<double> bounds_;
};

// zlib's CRC-32 (the polynomial 0xEDB88320, reflected), which Python's
// zlib.crc32 computes: the draws' key of a layer's path, as
// python/autoshard/keras/_augmentation_layers.py keys its layers'.
uint32_t crc32_of(const std::string& text) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char byte : text) {
    c ^= byte;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

constexpr int kDrawBits = 16;  // resolution of a uniform draw: 2^-16

// A whole number drawn uniformly in [0, n) for the whole batch, as f32 [1]:
// 16 fair bits from the dropout op (an element kept with probability 1/2,
// keyed by (key, step, element)) make u in [0, 1); the number is the count
// of k in 1 .. n-1 with u * n >= k. A seeded layer keys its draws by `what`
// and its seed (two layers of one seed draw alike, as Keras's
// SeedGenerator), an unseeded one by its path in the model.
Value draw_index(Trace& t, const std::string& what, std::optional<uint64_t> seed, int64_t n) {
  Graph& g = t.graph();
  uint64_t key = crc32_of(seed ? what : t.path(what)) ^ (seed.value_or(0) * 0x9E3779B1ull);
  key += t.seed() * 0x9E3779B97F4A7C15ull;
  Value ones = ops::constant(g, {1}, 1.0), unit;
  for (int k = 1; k <= kDrawBits; ++k) {
    Value bit = ops::dropout(ones, 0.5, key + uint64_t(k) * 0x632BE59BD9B4E019ull);  // 0 or 2
    Value term = bit * ops::constant(g, {}, std::ldexp(1.0, -(k + 1)));
    unit = unit.valid() ? unit + term : term;
  }
  Value u = unit * ops::constant(g, {}, double(n));
  Value index = ops::constant(g, {1}, 0.0), one = ops::constant(g, {}, 1.0);
  for (int64_t k = 1; k < n; ++k)
    index = index + (one - positive(ops::constant(g, {}, double(k)) - u));  // u >= k
  return index;
}

// x's `size` rows (axis 1) or columns (axis 2) from `start` (f32 [1]): a
// product with the 0/1 matrix picking them.
Value window(Value x, int axis, Value start, int64_t size) {
  Graph& g = *x.graph;
  const int64_t n = x.dim(axis);
  Value rows = ops::reshape(positions(g, n), {1, n});
  Value picks = equal_to(rows, ops::reshape(positions(g, size), {size, 1}) + start);
  return ops::einsum(axis == 1 ? "ir,brwc->biwc" : "jw,bhwc->bhjc", picks, x);
}

class RandomCropImpl : public LayerImpl {
 public:
  RandomCropImpl(int64_t height, int64_t width, std::optional<uint64_t> seed, std::string name)
      : LayerImpl(std::move(name)), height_(height), width_(width), seed_(seed) {
    AS_CHECK(height > 0 && width > 0, "RandomCrop: height and width must be positive, got ", height,
             " and ", width);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = image_input(inputs, "RandomCrop", name());
    const int64_t h = x.dim(1), w = x.dim(2);
    if (!t.training())
      return resize_image(crop_to_aspect(x, height_, width_), height_, width_, false);
    AS_CHECK(h >= height_ && w >= width_, "RandomCrop ", name(), ": images of ", h, "x", w,
             " are smaller than the crop ", height_, "x", width_, " (add a Resizing layer before)");
    x = window(x, 1, draw_index(t, "top", seed_, h - height_ + 1), height_);
    return window(x, 2, draw_index(t, "left", seed_, w - width_ + 1), width_);
  }

 private:
  int64_t height_, width_;
  std::optional<uint64_t> seed_;
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

Resizing::Resizing(int64_t height, int64_t width, ResizingOptions options)
    : Layer(std::make_shared<ResizingImpl>(
          height, width,
          (options.name_ = layer_name_or_default(options.name_, "resizing"), std::move(options)))) {
}

CategoryEncoding::CategoryEncoding(int64_t num_tokens, CategoryOutput mode, std::string name)
    : Layer(std::make_shared<CategoryEncodingImpl>(
          num_tokens, mode, layer_name_or_default(name, "category_encoding"))) {}

Discretization::Discretization(std::vector<double> bin_boundaries, std::string name)
    : Layer(std::make_shared<DiscretizationImpl>(std::move(bin_boundaries),
                                                 layer_name_or_default(name, "discretization"))) {}

RandomCrop::RandomCrop(int64_t height, int64_t width, std::optional<uint64_t> seed,
                       std::string name)
    : Layer(std::make_shared<RandomCropImpl>(height, width, seed,
                                             layer_name_or_default(name, "random_crop"))) {}

InferencePassThrough::InferencePassThrough(std::string name, std::string keras_class)
    : Layer(std::make_shared<InferencePassThroughImpl>(std::move(name), std::move(keras_class))) {}

}  // namespace autoshard
