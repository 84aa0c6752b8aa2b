// Small functions written as compositions of IR primitives, for the Keras
// layers, losses and optimizers:
//
//   maximum, minimum, clip: sums of relu (no primitive needed).
//   assign: a CacheWrite of the whole value into a view of a state
//           parameter: the in-place write of non-trained state (moving
//           statistics, optimizer accumulators) inside a traced step.
#pragma once

#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard::composed {

// Elementwise, with numpy broadcasting. At ties the gradient goes to `a`
// (TensorFlow's rule for maximum and minimum).
Value maximum(Value a, Value b);
Value minimum(Value a, Value b);
// min(max(x, lo), hi); the gradient passes where lo < x < hi.
Value clip(Value x, double lo, double hi);

// Writes `value` into `target` (a Parameter: a weight or optimizer slot) in
// place, after every op traced before this call that reads it. Returns the
// write's node (its output is the written view).
Value assign(Value target, Value value);
// The Reshape views that assigns write through: each must keep its
// parameter's own layout (a view of a converted copy would take the write
// instead of the parameter), so planners leave them to follow it.
std::vector<int> assign_views(const Graph& g);

}  // namespace autoshard::composed
