// Reverse-mode automatic differentiation on the Graph: appends the gradient
// ops (each op's VJP rule, see src/ir/op_def.h) and returns dLoss/dValue for
// each requested value.
#pragma once

#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard {

// `loss` must be a scalar. Values that do not influence the loss get a zero
// gradient (a Constant node), never an invalid Value.
std::vector<Value> gradients(Value loss, const std::vector<Value>& wrt);

}  // namespace autoshard
