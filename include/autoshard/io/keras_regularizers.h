// Keras's regularizers and constraints from their serialized form, as layer
// configs hold them ({"class_name": "L2", "config": {"l2": 0.01}}, or a
// name such as "l2") and as Python's keras.regularizers and
// keras.constraints pass them: the functions of autoshard/nn/regularizers.h.
//
//   Trace::Penalty p = keras_regularizer(json::parse(R"({"class_name": "L1L2",
//       "config": {"l1": 0.0, "l2": 0.01}})"), "dense: kernel_regularizer");
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/nn/trace.h"

namespace autoshard {

// L1, L2, L1L2 and OrthogonalRegularizer (Keras 3's and Keras 2's class
// names and config fields; names "l1", "l2", "l1_l2" and
// "orthogonal_regularizer" with Keras's defaults). Anything else is an
// error starting with `where`.
Trace::Penalty keras_regularizer(const nlohmann::json& spec, const std::string& where);
// MaxNorm, MinMaxNorm, NonNeg and UnitNorm (names "max_norm",
// "min_max_norm", "non_neg", "unit_norm"; Keras 2's "maxnorm", ...).
Trace::Penalty keras_constraint(const nlohmann::json& spec, const std::string& where);

}  // namespace autoshard
