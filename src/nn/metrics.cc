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

// A mean over examples: a batch's sum and how many examples it had.
struct Total {
  double sum = 0;
  int64_t count = 0;
};

Metric mean_metric(const std::string& name,
                   std::function<Total(const Tensor& predictions, const Tensor& targets)> total) {
  return {name,
          [total](const Tensor& predictions, const Tensor& targets) {
            const Total t = total(predictions, targets);
            return Metric::Sums{t.sum, double(t.count)};
          },
          [](const Metric::Sums& sums) { return sums[1] > 0 ? sums[0] / sums[1] : 0.0; }, true};
}

}  // namespace

Metric sparse_top_k_categorical_accuracy(int k) {
  AS_CHECK(k >= 1, "top-k accuracy needs k >= 1, got ", k);
  const std::string name =
      k == 5 ? "sparse_top_k_categorical_accuracy" : "top_" + std::to_string(k);
  return mean_metric(name, [k, name](const Tensor& predictions, const Tensor& targets) {
    const Rows r = rows_of(predictions, targets, name);
    Total total{0, r.rows};
    for (int64_t i = 0; i < r.rows; ++i) {
      const float* row = r.scores + i * r.classes;
      const float target = row[checked_class(targets, i, r.classes, name)];
      const int64_t higher =
          std::count_if(row, row + r.classes, [&](float s) { return s > target; });
      total.sum += higher < k;
    }
    return total;
  });
}

Metric sparse_categorical_accuracy() {
  const std::string name = "sparse_categorical_accuracy";
  return mean_metric(name, [name](const Tensor& predictions, const Tensor& targets) {
    const Rows r = rows_of(predictions, targets, name);
    Total total{0, r.rows};
    for (int64_t i = 0; i < r.rows; ++i)
      total.sum +=
          argmax(r.scores + i * r.classes, r.classes) == checked_class(targets, i, r.classes, name);
    return total;
  });
}

Metric accuracy() {
  return mean_metric("accuracy", [](const Tensor& predictions, const Tensor& targets) {
    if (targets.dtype() == DType::I32) {
      const Metric::Sums sums = sparse_categorical_accuracy().accumulate(predictions, targets);
      return Total{sums[0], int64_t(sums[1])};
    }
    AS_CHECK(targets.dtype() == DType::F32 && targets.shape() == predictions.shape() &&
                 predictions.rank() >= 1,
             "accuracy: f32 targets must have the predictions' shape ",
             shape_str(predictions.shape()), ", got ", shape_str(targets.shape()));
    const int64_t classes = predictions.shape().back();
    const int64_t rows = classes ? predictions.numel() / classes : 0;
    Total total{0, rows};
    for (int64_t i = 0; i < rows; ++i) {
      const float* p = predictions.f32() + i * classes;
      const float* t = targets.f32() + i * classes;
      total.sum +=
          classes == 1 ? (p[0] > 0.5f) == (t[0] > 0.5f) : argmax(p, classes) == argmax(t, classes);
    }
    return total;
  });
}

namespace {

// f32 predictions and targets of one shape, as rows of the last axis.
struct Pairs {
  const float *p, *t;
  int64_t rows, width;
  Tensor widened = {};  // integer targets as f32, when `t` points into them
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
Total per_example_mean(const Pairs& x, F f) {
  Total total{0, x.rows};
  for (int64_t r = 0; r < x.rows; ++r) {
    double row = 0;
    for (int64_t c = 0; c < x.width; ++c) row += f(x.p[r * x.width + c], x.t[r * x.width + c]);
    total.sum += row / double(x.width);
  }
  return total;
}

}  // namespace

Metric binary_accuracy(double threshold) {
  return mean_metric("binary_accuracy",
                     [threshold](const Tensor& predictions, const Tensor& targets) {
                       const Pairs x = pairs_of(predictions, targets, "binary_accuracy");
                       return per_example_mean(x, [threshold](float p, float t) {
                         return double((p > threshold) == (t > threshold));
                       });
                     });
}

Metric mean_absolute_error() {
  return mean_metric("mean_absolute_error", [](const Tensor& predictions, const Tensor& targets) {
    return per_example_mean(pairs_of(predictions, targets, "mean_absolute_error"),
                            [](float p, float t) { return std::abs(double(p) - t); });
  });
}

Metric mean_squared_error() {
  return mean_metric("mean_squared_error", [](const Tensor& predictions, const Tensor& targets) {
    return per_example_mean(pairs_of(predictions, targets, "mean_squared_error"),
                            [](float p, float t) {
                              const double d = double(p) - t;
                              return d * d;
                            });
  });
}

Metric categorical_accuracy() {
  return mean_metric("categorical_accuracy", [](const Tensor& predictions, const Tensor& targets) {
    const Pairs x = pairs_of(predictions, targets, "categorical_accuracy");
    Total total{0, x.rows};
    for (int64_t r = 0; r < x.rows; ++r)
      total.sum += argmax(x.p + r * x.width, x.width) == argmax(x.t + r * x.width, x.width);
    return total;
  });
}

Metric top_k_categorical_accuracy(int k) {
  AS_CHECK(k >= 1, "top-k accuracy needs k >= 1, got ", k);
  const std::string name = "top_k_categorical_accuracy";
  return mean_metric(name, [k, name](const Tensor& predictions, const Tensor& targets) {
    const Pairs x = pairs_of(predictions, targets, name);
    Total total{0, x.rows};
    for (int64_t r = 0; r < x.rows; ++r) {
      const float* row = x.p + r * x.width;
      const float target = row[argmax(x.t + r * x.width, x.width)];
      total.sum += std::count_if(row, row + x.width, [&](float s) { return s > target; }) < k;
    }
    return total;
  });
}

Metric mean_absolute_percentage_error() {
  const std::string name = "mean_absolute_percentage_error";
  return mean_metric(name, [name](const Tensor& predictions, const Tensor& targets) {
    return per_example_mean(pairs_of(predictions, targets, name), [](float p, float t) {
      return 100.0 * std::abs(double(t) - p) / std::max(std::abs(double(t)), 1e-7);
    });
  });
}

namespace {

// 2-D f32 predictions and targets of one shape, as Keras's FBetaScore and
// R2Score require.
Pairs matrices_of(const Tensor& predictions, const Tensor& targets, const std::string& metric) {
  AS_CHECK(predictions.rank() == 2, metric, " needs 2-D predictions (batch, outputs), got ",
           shape_str(predictions.shape()));
  if (targets.dtype() != DType::I32) return pairs_of(predictions, targets, metric);
  Tensor widened(targets.shape());
  std::copy(targets.i32(), targets.i32() + targets.numel(), widened.f32());
  Pairs x = pairs_of(predictions, widened, metric);
  x.widened = std::move(widened);  // shares the storage `x.t` points into
  return x;
}

// F-beta from one class's counts, with Keras's 1e-7 guards.
double fbeta_of(double tp, double fp, double fn, double beta) {
  const double precision = tp / (tp + fp + 1e-7), recall = tp / (tp + fn + 1e-7);
  const double b2 = beta * beta;
  return (1 + b2) * precision * recall / (b2 * precision + recall + 1e-7);
}

}  // namespace

Metric fbeta_score(const std::string& average, double beta, double threshold) {
  AS_CHECK(average == "micro" || average == "macro" || average == "weighted",
           "FBetaScore: average must be 'micro', 'macro' or 'weighted', got '", average,
           "' (a score per class is not one number to log)");
  AS_CHECK(beta > 0, "FBetaScore: beta must be > 0, got ", beta);
  AS_CHECK(threshold < 0 || (threshold > 0 && threshold <= 1),
           "FBetaScore: threshold must be in (0, 1], got ", threshold);
  const std::string name = beta == 1 ? "f1_score" : "fbeta_score";
  // Sums: per class, true positives, false positives, false negatives,
  // positive labels.
  auto accumulate = [name, threshold](const Tensor& predictions, const Tensor& targets) {
    const Pairs x = matrices_of(predictions, targets, name);
    Metric::Sums sums(size_t(4 * x.width), 0.0);
    for (int64_t r = 0; r < x.rows; ++r) {
      const float* p = x.p + r * x.width;
      const float top = *std::max_element(p, p + x.width);
      for (int64_t c = 0; c < x.width; ++c) {
        const bool predicted =
            threshold < 0 ? p[c] >= top && std::abs(p[c]) > 1e-9 : p[c] > threshold;
        const double label = x.t[r * x.width + c];
        sums[size_t(4 * c)] += predicted * label;
        sums[size_t(4 * c + 1)] += predicted * (1 - label);
        sums[size_t(4 * c + 2)] += (1 - predicted) * label;
        sums[size_t(4 * c + 3)] += label;
      }
    }
    return sums;
  };
  auto result = [average, beta](const Metric::Sums& s) {
    const size_t classes = s.size() / 4;
    if (average == "micro") {
      double tp = 0, fp = 0, fn = 0;
      for (size_t c = 0; c < classes; ++c) tp += s[4 * c], fp += s[4 * c + 1], fn += s[4 * c + 2];
      return fbeta_of(tp, fp, fn, beta);
    }
    double total = 0, labels = 0;
    for (size_t c = 0; c < classes; ++c) labels += s[4 * c + 3];
    for (size_t c = 0; c < classes; ++c) {
      const double f = fbeta_of(s[4 * c], s[4 * c + 1], s[4 * c + 2], beta);
      total += average == "weighted" ? f * s[4 * c + 3] / (labels + 1e-7) : f / double(classes);
    }
    return total;
  };
  return {name, accumulate, result};
}

Metric r2_score(const std::string& class_aggregation, int num_regressors) {
  AS_CHECK(
      class_aggregation == "uniform_average" || class_aggregation == "variance_weighted_average",
      "R2Score: class_aggregation must be 'uniform_average' or 'variance_weighted_average', "
      "got '",
      class_aggregation, "' (a score per output is not one number to log)");
  AS_CHECK(num_regressors >= 0, "R2Score: num_regressors must be >= 0, got ", num_regressors);
  // Sums: the number of values, then per output column the sum of targets,
  // of their squares, of the squared residuals, and the count.
  auto accumulate = [](const Tensor& predictions, const Tensor& targets) {
    const Pairs x = matrices_of(predictions, targets, "r2_score");
    Metric::Sums sums(size_t(1 + 4 * x.width), 0.0);
    sums[0] = double(x.rows * x.width);
    for (int64_t r = 0; r < x.rows; ++r)
      for (int64_t c = 0; c < x.width; ++c) {
        const double t = x.t[r * x.width + c], d = t - x.p[r * x.width + c];
        double* column = &sums[size_t(1 + 4 * c)];
        column[0] += t, column[1] += t * t, column[2] += d * d, column[3] += 1;
      }
    return sums;
  };
  auto result = [class_aggregation, num_regressors](const Metric::Sums& s) {
    const size_t outputs = (s.size() - 1) / 4;
    double score = 0, weights = 0;
    for (size_t c = 0; c < outputs; ++c) {
      const double* column = &s[1 + 4 * c];
      const double total = column[1] - column[0] * (column[0] / column[3]);
      double raw = 1 - column[2] / total;
      if (std::isinf(raw)) raw = 0;
      score += class_aggregation == "uniform_average" ? raw / double(outputs) : total * raw;
      weights += total;
    }
    if (class_aggregation != "uniform_average") score /= weights;
    const double n = s[0], p = num_regressors;
    if (p != 0 && p < n - 1) score = 1 - (1 - score) * (n - 1) / (n - p - 1);
    return score;
  };
  return {"r2_score", accumulate, result};
}

Metric by_name(const std::string& name) {
  if (name == "accuracy" || name == "acc") return accuracy();
  if (name == "binary_accuracy") return binary_accuracy();
  if (name == "mae" || name == "mean_absolute_error") return mean_absolute_error();
  if (name == "mse" || name == "mean_squared_error") return mean_squared_error();
  if (name == "sparse_categorical_accuracy") return sparse_categorical_accuracy();
  if (name == "categorical_accuracy") return categorical_accuracy();
  if (name == "top_k_categorical_accuracy") return top_k_categorical_accuracy(5);
  if (name == "mape" || name == "mean_absolute_percentage_error")
    return mean_absolute_percentage_error();
  // The confusion metrics and R2 with Keras's defaults, by the names Keras
  // logs them under (what a saved compile config lists).
  if (name == "auc") return auc();
  if (name == "precision") return precision();
  if (name == "recall") return recall();
  if (name == "r2_score") return r2_score();
  for (ConfusionCell cell : {ConfusionCell::TruePositives, ConfusionCell::FalsePositives,
                             ConfusionCell::TrueNegatives, ConfusionCell::FalseNegatives})
    if (name == confusion_count(cell).name) return confusion_count(cell);
  if (name == "sparse_top_k_categorical_accuracy") return sparse_top_k_categorical_accuracy(5);
  if (name.starts_with("top_")) {
    const std::string k = name.substr(4);
    AS_CHECK(!k.empty() && k.size() < 7 && std::all_of(k.begin(), k.end(), ::isdigit), "metric '",
             name, "': top_K needs a whole number K, e.g. top_5");
    return sparse_top_k_categorical_accuracy(std::stoi(k));
  }
  fail("unknown metric '", name,
       "' (known: accuracy, sparse_categorical_accuracy, sparse_top_k_categorical_accuracy, "
       "top_K, categorical_accuracy, top_k_categorical_accuracy, binary_accuracy, mae, mse, "
       "mape, auc, precision, recall, true_positives, false_positives, true_negatives, "
       "false_negatives, r2_score)");
}

}  // namespace autoshard::metrics
