// Keras's weight regularizers and constraints as functions of a traced
// tensor (Trace::Penalty), for Model::set_regularizers and
// Model::set_constraints:
//
//   model.set_regularizers({{"dense.kernel", regularizers::l1_l2(0, 0.01)}}, {});
//   model.set_constraints({{"dense.kernel", constraints::max_norm(2.0, {0})}});
//
// Keras 3's formulas (keras/src/regularizers/regularizers.py,
// keras/src/constraints/constraints.py), with its epsilon 1e-7.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/nn/trace.h"

namespace autoshard {

namespace regularizers {
// keras.regularizers.L1L2 (L1 and L2 are its halves): the scalar
// l1 * sum(|x|) + l2 * sum(x^2).
Trace::Penalty l1_l2(double l1, double l2);
// keras.regularizers.OrthogonalRegularizer of a 2-D weight: the rows (or
// columns) normalised to unit length, factor * mean |n_i . n_j| over the
// pairs i < j.
Trace::Penalty orthogonal(double factor, bool rows);
// Whether `penalty` of a batch is the sum of its terms over any split of the
// batch's examples (L1L2's sums over elements are; the orthogonal one's
// pairs of rows are not): what pipelined micro-batches can compute apart.
bool adds_over_examples(const Trace::Penalty& penalty);
}  // namespace regularizers

namespace constraints {
// keras.constraints.MaxNorm: the norms over `axes` clipped to max_value:
// w * clip(norm, 0, max_value) / (epsilon + norm).
Trace::Penalty max_norm(double max_value, std::vector<int64_t> axes);
// keras.constraints.MinMaxNorm: w * (rate * clip(norm, min, max) +
// (1 - rate) * norm) / (epsilon + norm).
Trace::Penalty min_max_norm(double min_value, double max_value, double rate,
                            std::vector<int64_t> axes);
// keras.constraints.NonNeg: the negative elements set to 0.
Trace::Penalty non_neg();
// keras.constraints.UnitNorm: w / (epsilon + norm over `axes`).
Trace::Penalty unit_norm(std::vector<int64_t> axes);
}  // namespace constraints

}  // namespace autoshard
