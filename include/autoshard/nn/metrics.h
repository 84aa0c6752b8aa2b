// Metrics: how good the model's predictions of a batch are, reported by fit
// and evaluate next to the loss (Keras's `metrics=[...]` in compile).
//
//   model.compile(AdamW(), losses::sparse_categorical_crossentropy,
//                 {metrics::accuracy(), metrics::sparse_top_k_categorical_accuracy(5)});
//   History h = model.fit(x, y, {.epochs = 3});   // h.metrics["accuracy"][epoch]
//   Logs l = model.evaluate_with_metrics(x, y);   // l["loss"], l["accuracy"], ...
//
// A metric is computed on the host from the step's predictions (gathered
// whole) and the targets: each batch adds to running sums (a mean's sum and
// count, a confusion matrix's cells) and the metric is a function of the
// sums over an epoch, so that batches of any size, on any mesh, give
// exactly the metric of the whole epoch (Keras's update_state / result).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct Metric {
  using Sums = std::vector<double>;
  std::string name;
  // What one batch adds to the running sums (the same length every batch).
  std::function<Sums(const Tensor& predictions, const Tensor& targets)> accumulate;
  // The metric from the sums over an epoch's batches.
  std::function<double(const Sums& sums)> result;
  // Keras's MeanMetricWrapper (the accuracies, the errors, a metric
  // function): a mean of per-example values, whose masked outputs leave
  // their masked steps out (metrics::masked_sums); other metrics (the
  // confusion counts, AUC, F-scores, R2) ignore masks, as Keras's do.
  bool mean = false;

  // The metric of one batch alone.
  double of(const Tensor& predictions, const Tensor& targets) const {
    return result(accumulate(predictions, targets));
  }
};

namespace metrics {
// The share of examples whose largest prediction (the first, on ties) is at
// the target class: predictions [..., classes] (logits or probabilities),
// targets [...] i32 class ids.
Metric sparse_categorical_accuracy();
// The share whose target class is among the k largest predictions: fewer
// than k classes score strictly higher than the target's.
Metric sparse_top_k_categorical_accuracy(int k);
// Keras's "accuracy": sparse categorical accuracy for i32 class ids;
// for f32 targets shaped like the predictions, the argmax of both agreeing
// (one-hot targets), or with one output per example, the prediction and the
// target on the same side of 0.5 (binary).
Metric accuracy();
// The share of elements whose prediction is on the target's side of
// `threshold` (prediction > threshold against target > threshold); f32
// targets of the predictions' shape (Keras's BinaryAccuracy).
Metric binary_accuracy(double threshold = 0.5);
// Each example's mean of |prediction - target| (or its square) over its
// last axis, averaged over examples; f32 targets of the predictions' shape.
Metric mean_absolute_error();
Metric mean_squared_error();
// Keras's CategoricalAccuracy and TopKCategoricalAccuracy: one-hot (or
// probability) f32 targets of the predictions' shape, their argmax the class.
Metric categorical_accuracy();
Metric top_k_categorical_accuracy(int k = 5);
// 100 |target - prediction| / max(|target|, 1e-7), each example's mean over
// its last axis, averaged over examples (Keras's MeanAbsolutePercentageError).
Metric mean_absolute_percentage_error();

// The confusion-matrix metrics (keras.metrics.TruePositives, ..., Precision,
// Recall): a prediction above `threshold` counts as positive, a nonzero
// target as a positive label. Targets f32 or i32, of the predictions' shape
// (or without its last axis when that is 1). `class_id` >= 0 keeps only that
// column of the last axis; `top_k` > 0 counts only each row's k largest
// predictions as candidates (Keras's top_k: then with no threshold each of
// them is positive; otherwise the threshold defaults to 0.5).
struct ConfusionOptions {
  std::optional<double> threshold;
  int top_k = 0;
  int class_id = -1;
};
enum class ConfusionCell { TruePositives, FalsePositives, TrueNegatives, FalseNegatives };
Metric confusion_count(ConfusionCell cell, ConfusionOptions options = {});
Metric precision(ConfusionOptions options = {});  // tp / (tp + fp), 0 without predicted positives
Metric recall(ConfusionOptions options = {});     // tp / (tp + fn), 0 without positive labels

// Keras's AUC: the area under the ROC or precision-recall curve, over
// `num_thresholds` thresholds spread evenly over [0, 1] (the ends moved out by
// 1e-7), predictions clipped to [0, 1] (after a sigmoid with from_logits);
// ROC's area by trapezoids (or the lower/upper rectangles: "minoring",
// "majoring"), PR's by Davis and Goadrich's interpolation. multi_label: one
// curve per column of the last axis, their mean area.
struct AucOptions {
  int num_thresholds = 200;
  std::string curve = "ROC";                       // or "PR"
  std::string summation_method = "interpolation";  // or "minoring", "majoring"
  bool multi_label = false;
  bool from_logits = false;
};
Metric auc(AucOptions options = {});

// Keras's FBetaScore (F1Score: beta 1) over the classes of the last axis of
// 2-D predictions: a prediction above `threshold` is positive, or with no
// threshold (< 0) each row's maxima that are not 0; "micro" (all counts
// pooled), "macro" (the classes' mean) or "weighted" (by each class's
// positive labels) average.
Metric fbeta_score(const std::string& average, double beta = 1.0, double threshold = -1);
// Keras's R2Score on 2-D f32 targets and predictions: per output column
// 1 - residual / total sum of squares (0 where that is infinite), their
// "uniform_average" or "variance_weighted_average", adjusted for
// `num_regressors` as Keras does (left alone when there are too few values).
Metric r2_score(const std::string& class_aggregation = "uniform_average", int num_regressors = 0);

// By Keras name: "accuracy" ("acc"), "sparse_categorical_accuracy",
// "sparse_top_k_categorical_accuracy" (k = 5), "top_K" (e.g. "top_3"),
// "binary_accuracy", "mae" ("mean_absolute_error"), "mse" ("mean_squared_error").
Metric by_name(const std::string& name);
}  // namespace metrics

}  // namespace autoshard
