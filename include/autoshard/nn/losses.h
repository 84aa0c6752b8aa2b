// Losses: functions from (predictions, targets) to a scalar mean loss, traced
// into the Graph like any layer.
//
// Keras's loss classes with their options and defaults (Keras 3's formulas;
// the mean is over every element but the class axis, Keras's
// "sum_over_batch_size"):
//
//   model.compile(optimizers::Adam(),
//                 losses::SparseCategoricalCrossentropy({.from_logits = true}));
//   model.compile(optimizers::Adam(), {losses::BinaryCrossentropy(), losses::Huber()},
//                 /*loss_weights=*/{1.0, 0.5});
#pragma once

#include <functional>
#include <string>

#include "autoshard/ir/graph.h"

namespace autoshard {

using Loss = std::function<Value(Value predictions, Value targets)>;

namespace losses {
// Mean softmax cross-entropy of logits [..., classes] against i32 class ids
// [...] (keras.losses.SparseCategoricalCrossentropy(from_logits=True)).
Value sparse_categorical_crossentropy(Value logits, Value targets);
// Mean of (predictions - targets)^2 over every element.
Value mean_squared_error(Value predictions, Value targets);

struct CrossentropyOptions {
  // Predictions are logits (true) or probabilities (false, Keras's default:
  // normalised over the class axis and clipped to [1e-7, 1 - 1e-7]).
  bool from_logits = false;
  // Targets become t * (1 - s) + s / classes (binary: + s / 2).
  double label_smoothing = 0;
};
struct SparseCrossentropyOptions {
  bool from_logits = false;
};

// Targets f32 [..., classes] (one-hot or any distribution).
Loss CategoricalCrossentropy(CrossentropyOptions options = {});
// Targets i32 class ids [...] for predictions [..., classes].
Loss SparseCategoricalCrossentropy(SparseCrossentropyOptions options = {});
// Targets f32 in [0, 1], the predictions' shape: -(t log p + (1 - t) log(1 - p)),
// from logits x: softplus(x) - t x.
Loss BinaryCrossentropy(CrossentropyOptions options = {});
Loss MeanSquaredError();
// Mean of |predictions - targets|.
Loss MeanAbsoluteError();
// 0.5 e^2 where |e| <= delta, else delta (|e| - 0.5 delta), e = predictions - targets.
Loss Huber(double delta = 1.0);

// By Keras name, with Keras's defaults (probabilities, not logits):
// "categorical_crossentropy", "sparse_categorical_crossentropy",
// "binary_crossentropy", "mse" / "mean_squared_error", "mae" /
// "mean_absolute_error", "huber".
Loss by_name(const std::string& name);
}  // namespace losses

}  // namespace autoshard
