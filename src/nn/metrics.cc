#include "autoshard/nn/metrics.h"

#include <algorithm>
#include <cmath>

#include "autoshard/error.h"

namespace autoshard::metrics {
namespace {

// Predictions [..., C] as rows of C against targets [...] of class ids.
struct Rows {
  const float* scores;
  int64_t rows, classes;
};

Rows rows_of(const Tensor& predictions, const Tensor& targets, const std::string& metric) {
  AS_CHECK(predictions.dtype() == DType::F32 && predictions.rank() >= 1, metric,
           ": predictions must be f32 [..., classes], got ", shape_str(predictions.shape()));
  AS_CHECK(targets.dtype() == DType::I32, metric, ": targets must be i32 class ids");
  Shape rows_shape = predictions.shape();
  rows_shape.pop_back();
  AS_CHECK(targets.shape() == rows_shape, metric, ": targets ", shape_str(targets.shape()),
           " do not match predictions ", shape_str(predictions.shape()), " (expected ",
           shape_str(rows_shape), ")");
  return {predictions.f32(), targets.numel(), predictions.shape().back()};
}

int32_t checked_class(const Tensor& targets, int64_t r, int64_t classes,
                      const std::string& metric) {
  const int32_t t = targets.i32()[r];
  AS_CHECK(t >= 0 && t < classes, metric, ": target class ", t, " is out of range for ", classes,
           " classes");
  return t;
}

int64_t argmax(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;  // the first of equal maxima
}

}  // namespace

Metric sparse_top_k_categorical_accuracy(int k) {
  AS_CHECK(k >= 1, "top-k accuracy needs k >= 1, got ", k);
  const std::string name =
      k == 5 ? "sparse_top_k_categorical_accuracy" : "top_" + std::to_string(k);
  return {name, [k, name](const Tensor& predictions, const Tensor& targets) {
            const Rows r = rows_of(predictions, targets, name);
            Metric::Total total{0, r.rows};
            for (int64_t i = 0; i < r.rows; ++i) {
              const float* row = r.scores + i * r.classes;
              const float target = row[checked_class(targets, i, r.classes, name)];
              const int64_t higher =
                  std::count_if(row, row + r.classes, [&](float s) { return s > target; });
              total.sum += higher < k;
            }
            return total;
          }};
}

Metric sparse_categorical_accuracy() {
  const std::string name = "sparse_categorical_accuracy";
  return {name, [name](const Tensor& predictions, const Tensor& targets) {
            const Rows r = rows_of(predictions, targets, name);
            Metric::Total total{0, r.rows};
            for (int64_t i = 0; i < r.rows; ++i)
              total.sum += argmax(r.scores + i * r.classes, r.classes) ==
                           checked_class(targets, i, r.classes, name);
            return total;
          }};
}

Metric accuracy() {
  return {"accuracy", [](const Tensor& predictions, const Tensor& targets) {
            if (targets.dtype() == DType::I32)
              return sparse_categorical_accuracy().measure(predictions, targets);
            AS_CHECK(targets.dtype() == DType::F32 && targets.shape() == predictions.shape() &&
                         predictions.rank() >= 1,
                     "accuracy: f32 targets must have the predictions' shape ",
                     shape_str(predictions.shape()), ", got ", shape_str(targets.shape()));
            const int64_t classes = predictions.shape().back();
            const int64_t rows = classes ? predictions.numel() / classes : 0;
            Metric::Total total{0, rows};
            for (int64_t i = 0; i < rows; ++i) {
              const float* p = predictions.f32() + i * classes;
              const float* t = targets.f32() + i * classes;
              total.sum += classes == 1 ? (p[0] > 0.5f) == (t[0] > 0.5f)
                                        : argmax(p, classes) == argmax(t, classes);
            }
            return total;
          }};
}

namespace {

// f32 predictions and targets of one shape, as rows of the last axis.
struct Pairs {
  const float *p, *t;
  int64_t rows, width;
};

Pairs pairs_of(const Tensor& predictions, const Tensor& targets, const std::string& metric) {
  AS_CHECK(predictions.dtype() == DType::F32 && targets.dtype() == DType::F32, metric,
           ": predictions and targets must be f32");
  AS_CHECK(predictions.shape() == targets.shape(), metric, ": targets ", shape_str(targets.shape()),
           " do not match predictions ", shape_str(predictions.shape()));
  const int64_t width = predictions.rank() >= 2 ? predictions.shape().back() : 1;
  const int64_t rows = width ? predictions.numel() / width : 0;
  return {predictions.f32(), targets.f32(), rows, width};
}

// Sums each example's mean of f(prediction, target) over its last axis.
template <typename F>
Metric::Total per_example_mean(const Pairs& x, F f) {
  Metric::Total total{0, x.rows};
  for (int64_t r = 0; r < x.rows; ++r) {
    double row = 0;
    for (int64_t c = 0; c < x.width; ++c) row += f(x.p[r * x.width + c], x.t[r * x.width + c]);
    total.sum += row / double(x.width);
  }
  return total;
}

}  // namespace

Metric binary_accuracy(double threshold) {
  return {"binary_accuracy", [threshold](const Tensor& predictions, const Tensor& targets) {
            const Pairs x = pairs_of(predictions, targets, "binary_accuracy");
            return per_example_mean(x, [threshold](float p, float t) {
              return double((p > threshold) == (t > threshold));
            });
          }};
}

Metric mean_absolute_error() {
  return {"mean_absolute_error", [](const Tensor& predictions, const Tensor& targets) {
            return per_example_mean(pairs_of(predictions, targets, "mean_absolute_error"),
                                    [](float p, float t) { return std::abs(double(p) - t); });
          }};
}

Metric mean_squared_error() {
  return {"mean_squared_error", [](const Tensor& predictions, const Tensor& targets) {
            return per_example_mean(pairs_of(predictions, targets, "mean_squared_error"),
                                    [](float p, float t) {
                                      const double d = double(p) - t;
                                      return d * d;
                                    });
          }};
}

Metric by_name(const std::string& name) {
  if (name == "accuracy" || name == "acc") return accuracy();
  if (name == "binary_accuracy") return binary_accuracy();
  if (name == "mae" || name == "mean_absolute_error") return mean_absolute_error();
  if (name == "mse" || name == "mean_squared_error") return mean_squared_error();
  if (name == "sparse_categorical_accuracy") return sparse_categorical_accuracy();
  if (name == "sparse_top_k_categorical_accuracy") return sparse_top_k_categorical_accuracy(5);
  if (name.starts_with("top_")) {
    const std::string k = name.substr(4);
    AS_CHECK(!k.empty() && k.size() < 7 && std::all_of(k.begin(), k.end(), ::isdigit), "metric '",
             name, "': top_K needs a whole number K, e.g. top_5");
    return sparse_top_k_categorical_accuracy(std::stoi(k));
  }
  fail("unknown metric '", name,
       "' (known: accuracy, sparse_categorical_accuracy, sparse_top_k_categorical_accuracy, "
       "top_K, binary_accuracy, mae, mse)");
}

}  // namespace autoshard::metrics
