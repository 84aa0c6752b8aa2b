// Losses: functions from (predictions, targets) to a scalar mean loss, traced
// into the Graph like any layer.
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
// By Keras name: "sparse_categorical_crossentropy", "mse".
Loss by_name(const std::string& name);
}  // namespace losses

}  // namespace autoshard
