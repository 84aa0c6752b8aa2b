#include "autoshard/nn/metrics.h"

#include <algorithm>

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

Metric by_name(const std::string& name) {
  if (name == "accuracy" || name == "acc") return accuracy();
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
       "top_K)");
}

}  // namespace autoshard::metrics
