// The confusion-matrix metrics of nn/metrics.h: counts of true and false
// positives and negatives at thresholds, and what Keras makes of them
// (Precision, Recall, AUC). Keras's definitions: keras/src/metrics/
// confusion_metrics.py and metrics_utils.py (update_confusion_matrix_variables).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "autoshard/error.h"
#include "autoshard/nn/metrics.h"

namespace autoshard::metrics {
namespace {

// A prediction and its label (1 for a nonzero target), element by element.
struct Labelled {
  std::vector<float> scores, labels;
  int64_t width = 1;  // the predictions' last axis
};

// Targets of the predictions' shape, or without a last axis of 1 (Keras
// squeezes or expands one to match), f32 or i32.
Labelled labelled(const Tensor& predictions, const Tensor& targets, const std::string& metric) {
  AS_CHECK(predictions.dtype() == DType::F32, metric, ": predictions must be f32");
  AS_CHECK(targets.dtype() == DType::F32 || targets.dtype() == DType::I32, metric,
           ": targets must be f32 or integers");
  const bool same = targets.shape() == predictions.shape();
  Shape squeezed = predictions.shape();
  if (!squeezed.empty() && squeezed.back() == 1) squeezed.pop_back();
  AS_CHECK(same || targets.shape() == squeezed, metric, ": targets ", shape_str(targets.shape()),
           " do not match predictions ", shape_str(predictions.shape()));
  Labelled out;
  out.width = predictions.rank() >= 1 ? std::max<int64_t>(1, predictions.shape().back()) : 1;
  out.scores.assign(predictions.f32(), predictions.f32() + predictions.numel());
  out.labels.resize(size_t(targets.numel()));
  for (int64_t i = 0; i < targets.numel(); ++i)
    out.labels[size_t(i)] =
        targets.dtype() == DType::F32 ? targets.f32()[i] != 0.0f : targets.i32()[i] != 0;
  return out;
}

// Keras's top_k and class_id: only each row's k largest predictions stay
// candidates (the rest fall below any threshold), then only one column
// counts.
Labelled selected(Labelled x, const ConfusionOptions& o, const std::string& metric) {
  const int64_t rows = int64_t(x.scores.size()) / x.width;
  if (o.top_k > 0 && o.top_k < x.width)
    for (int64_t r = 0; r < rows; ++r) {
      float* row = x.scores.data() + r * x.width;
      // The k largest, the first of equal values before later ones (top_k's order).
      std::vector<int64_t> order(size_t(x.width));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [row](int64_t a, int64_t b) { return row[a] > row[b]; });
      for (size_t j = size_t(o.top_k); j < order.size(); ++j)
        row[order[j]] = -std::numeric_limits<float>::infinity();
    }
  if (o.class_id < 0) return x;
  AS_CHECK(o.class_id < x.width, metric, ": class_id ", o.class_id, " is past the ", x.width,
           " columns of the predictions");
  Labelled column;
  for (int64_t r = 0; r < rows; ++r) {
    column.scores.push_back(x.scores[size_t(r * x.width + o.class_id)]);
    column.labels.push_back(x.labels[size_t(r * x.width + o.class_id)]);
  }
  return column;
}

// tp, fp, tn, fn at one threshold.
Metric::Sums confusion(const Labelled& x, double threshold) {
  Metric::Sums s(4, 0.0);
  for (size_t i = 0; i < x.scores.size(); ++i) {
    const bool positive = x.scores[i] > threshold, label = x.labels[i] != 0;
    s[positive ? (label ? 0 : 1) : (label ? 3 : 2)] += 1;
  }
  return s;
}

std::string cell_name(ConfusionCell cell) {
  switch (cell) {
    case ConfusionCell::TruePositives:
      return "true_positives";
    case ConfusionCell::FalsePositives:
      return "false_positives";
    case ConfusionCell::TrueNegatives:
      return "true_negatives";
    default:
      return "false_negatives";
  }
}

Metric from_confusion(const std::string& name, const ConfusionOptions& o,
                      std::function<double(const Metric::Sums&)> result) {
  AS_CHECK(!o.threshold || (*o.threshold >= 0 && *o.threshold <= 1), name,
           ": threshold must be in [0, 1], got ", o.threshold.value_or(0));
  AS_CHECK(o.top_k >= 0 && o.class_id >= -1, name, ": top_k and class_id must not be negative");
  // Keras's default: 0.5, or with top_k every one of the k largest.
  const double threshold =
      o.threshold.value_or(o.top_k > 0 ? -std::numeric_limits<double>::infinity() : 0.5);
  return {name,
          [name, o, threshold](const Tensor& predictions, const Tensor& targets) {
            return confusion(selected(labelled(predictions, targets, name), o, name), threshold);
          },
          std::move(result)};
}

double ratio(double a, double b) {
  return b > 0 ? a / b : 0.0;  // Keras's divide_no_nan
}

}  // namespace

Metric confusion_count(ConfusionCell cell, ConfusionOptions options) {
  const size_t index = cell == ConfusionCell::TruePositives    ? 0
                       : cell == ConfusionCell::FalsePositives ? 1
                       : cell == ConfusionCell::TrueNegatives  ? 2
                                                               : 3;
  return from_confusion(cell_name(cell), options,
                        [index](const Metric::Sums& s) { return s[index]; });
}

Metric precision(ConfusionOptions options) {
  return from_confusion("precision", options,
                        [](const Metric::Sums& s) { return ratio(s[0], s[0] + s[1]); });
}

Metric recall(ConfusionOptions options) {
  return from_confusion("recall", options,
                        [](const Metric::Sums& s) { return ratio(s[0], s[0] + s[3]); });
}

namespace {

// Per label (one, or the columns with multi_label) and threshold: tp, fp,
// tn, fn, laid out [label][threshold][cell]. Thresholds as Keras spreads
// them: -1e-7, 1/(n-1), ..., (n-2)/(n-1), 1 + 1e-7. A prediction p is above
// threshold t (0 < t < n-1) when ceil(p (n-1)) - 1 >= t, so each prediction
// lands in one bucket and the counts at a threshold are the buckets' sums from
// it up (Keras's evenly-spread path, O(predictions + thresholds)).
Metric::Sums auc_counts(const Labelled& x, const AucOptions& o) {
  const int n = o.num_thresholds;
  const int64_t labels = o.multi_label ? x.width : 1;
  std::vector<double> positive_in(size_t(labels * n), 0.0), negative_in(size_t(labels * n), 0.0);
  for (size_t i = 0; i < x.scores.size(); ++i) {
    double p = x.scores[i];
    if (o.from_logits) p = 1 / (1 + std::exp(-p));
    p = std::clamp(p, 0.0, 1.0);
    const int bucket = std::max(0, int(std::ceil(p * double(n - 1))) - 1);
    const size_t at = size_t((o.multi_label ? int64_t(i) % x.width : 0) * n + bucket);
    (x.labels[i] != 0 ? positive_in : negative_in)[at] += 1;
  }
  Metric::Sums s(size_t(labels * n * 4), 0.0);
  for (int64_t l = 0; l < labels; ++l) {
    const double* pos = &positive_in[size_t(l * n)];
    const double* neg = &negative_in[size_t(l * n)];
    const double all_pos = std::accumulate(pos, pos + n, 0.0);
    const double all_neg = std::accumulate(neg, neg + n, 0.0);
    double tp = 0, fp = 0;
    for (int t = n - 1; t >= 0; --t) {
      tp += pos[t], fp += neg[t];  // bucket t is above thresholds 0..t
      double* cells = &s[size_t((l * n + t) * 4)];
      cells[0] = tp, cells[1] = fp, cells[2] = all_neg - fp, cells[3] = all_pos - tp;
    }
  }
  return s;
}

// One label's area from its counts at n thresholds.
double area(const double* c, int n, const AucOptions& o) {
  auto tp = [&](int t) { return c[4 * t]; };
  auto fp = [&](int t) { return c[4 * t + 1]; };
  auto tn = [&](int t) { return c[4 * t + 2]; };
  auto fn = [&](int t) { return c[4 * t + 3]; };
  double sum = 0;
  if (o.curve == "PR" && o.summation_method == "interpolation") {
    // Davis and Goadrich: tp and predicted positives linear between thresholds.
    for (int t = 0; t + 1 < n; ++t) {
      const double dtp = tp(t) - tp(t + 1), pa = tp(t) + fp(t), pb = tp(t + 1) + fp(t + 1);
      const double slope = ratio(dtp, std::max(pa - pb, 0.0));
      const double intercept = tp(t + 1) - slope * pb;
      const double p_ratio = pa > 0 && pb > 0 ? ratio(pa, std::max(pb, 0.0)) : 1.0;
      sum += ratio(slope * (dtp + intercept * std::log(p_ratio)),
                   std::max(tp(t + 1) + fn(t + 1), 0.0));
    }
    return sum;
  }
  auto x = [&](int t) {
    return o.curve == "ROC" ? ratio(fp(t), fp(t) + tn(t)) : ratio(tp(t), tp(t) + fn(t));
  };
  auto y = [&](int t) {
    return o.curve == "ROC" ? ratio(tp(t), tp(t) + fn(t)) : ratio(tp(t), tp(t) + fp(t));
  };
  for (int t = 0; t + 1 < n; ++t) {
    const double a = y(t), b = y(t + 1);
    const double height = o.summation_method == "interpolation" ? (a + b) / 2
                          : o.summation_method == "minoring"    ? std::min(a, b)
                                                                : std::max(a, b);
    sum += (x(t) - x(t + 1)) * height;
  }
  return sum;
}

}  // namespace

Metric auc(AucOptions o) {
  AS_CHECK(o.num_thresholds > 1, "AUC: num_thresholds must be > 1, got ", o.num_thresholds);
  AS_CHECK(o.curve == "ROC" || o.curve == "PR", "AUC: curve must be 'ROC' or 'PR', got '", o.curve,
           "'");
  AS_CHECK(o.summation_method == "interpolation" || o.summation_method == "minoring" ||
               o.summation_method == "majoring",
           "AUC: summation_method must be 'interpolation', 'minoring' or 'majoring', got '",
           o.summation_method, "'");
  return {"auc",
          [o](const Tensor& predictions, const Tensor& targets) {
            return auc_counts(labelled(predictions, targets, "auc"), o);
          },
          [o](const Metric::Sums& s) {
            const int n = o.num_thresholds;
            const size_t labels = s.size() / size_t(4 * n);
            double total = 0;
            for (size_t l = 0; l < labels; ++l) total += area(&s[l * size_t(4 * n)], n, o);
            return labels ? total / double(labels) : 0.0;
          }};
}

}  // namespace autoshard::metrics
