// Metrics: how good the model's predictions of a batch are, reported by fit
// and evaluate next to the loss (Keras's `metrics=[...]` in compile).
//
//   model.compile(AdamW(), losses::sparse_categorical_crossentropy,
//                 {metrics::accuracy(), metrics::sparse_top_k_categorical_accuracy(5)});
//   History h = model.fit(x, y, {.epochs = 3});   // h.metrics["accuracy"][epoch]
//   Logs l = model.evaluate_with_metrics(x, y);   // l["loss"], l["accuracy"], ...
//
// A metric is computed on the host from the step's predictions (gathered
// whole) and the targets, as a sum over examples with their count, so that
// batches of any size average exactly over an epoch.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct Metric {
  std::string name;
  struct Total {
    double sum = 0;
    int64_t count = 0;
  };
  // The metric summed over a batch's examples, and how many there were.
  std::function<Total(const Tensor& predictions, const Tensor& targets)> measure;
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
// By Keras name: "accuracy" ("acc"), "sparse_categorical_accuracy",
// "sparse_top_k_categorical_accuracy" (k = 5), "top_K" (e.g. "top_3"),
// "binary_accuracy", "mae" ("mean_absolute_error"), "mse" ("mean_squared_error").
Metric by_name(const std::string& name);
}  // namespace metrics

}  // namespace autoshard
