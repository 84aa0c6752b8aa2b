// An optimizer's state as the three Keras formats store it, mapped onto
// autoshard's optimizer slots ("optimizer.<slot>.<weight path>"):
//
//   Keras 3 (.keras model.weights.h5 `optimizer/vars/<i>`, and Keras 3's
//     legacy .h5 `optimizer_weights`): iteration, learning_rate, then per
//     trainable variable each of its slots (Adam: momentum, velocity).
//   Keras 2 (.h5 `optimizer_weights` named by `weight_names`): iterations,
//     then per slot every trainable variable (all m, then all v; Keras
//     2.3's placeholder `vhat_<i>` after them is ignored).
//   TensorFlow.js (weightsManifest entries with `"group": "optimizer"`):
//     iter (int32), then per slot every trainable variable
//     ("dense/kernel/m" ... "dense/kernel/v" ...).
//
// Trainable variables are the model's weights in the layers' order less the
// non-trainable ones (moving statistics), as Keras lists
// model.trainable_variables. Keras keeps SGD's momentum in weight units
// (m = momentum m - lr g); autoshard and TF.js in gradient units (u =
// momentum u + g), so Keras files hold -lr u.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/io/keras_model.h"
#include "io/keras/architecture.h"
#include "io/keras/weight_table.h"

namespace autoshard::keras {

// The order a file lists an optimizer's variables in.
struct OptimizerLayout {
  int lead = 1;              // scalars first: the iteration count (Keras 3: and the learning rate)
  bool interleaved = false;  // per variable all its slots (Keras 3), or per slot all variables
};

// A file's optimizer variables, in the file's order.
struct FileOptimizerState {
  std::vector<std::string> names;  // the file's names, for errors
  std::vector<StoredWeight> values;
  int64_t iterations = 0;
  OptimizerLayout layout;
};

// autoshard's slots of the compile config's optimizer in Keras's order per
// variable: Adam and AdamW {"m", "v"}, SGD with momentum {"momentum"},
// plain SGD {}; nullopt for optimizers whose state is not read or written
// (RMSprop, Adagrad).
std::optional<std::vector<std::string>> optimizer_slots(const KerasCompileConfig& compile);

// How a stored slot value relates to autoshard's: file = factor * autoshard.
double slot_factor(const KerasCompileConfig& compile, Dialect dialect, const std::string& slot);

// Adds the WeightSources of the optimizer's slots to `sources`, keyed
// "optimizer.<slot>.<weight>", for the `trainable` weights (C++ paths, in
// order) of `shapes`. Returns "" when the file's state was used, else why
// it was not (another optimizer, another number of variables, a shape that
// disagrees): the optimizer then starts from zero, as Keras does.
std::string add_optimizer_sources(const KerasCompileConfig& compile, Dialect dialect,
                                  const FileOptimizerState& file,
                                  const std::vector<std::string>& trainable,
                                  const std::map<std::string, Shape>& shapes,
                                  std::map<std::string, WeightSource>& sources);

// The optimizer's variables to write, in the output format's order.
struct OptimizerVars {
  int64_t iterations = 0;
  double learning_rate = 0;
  // Slot values in the format's order (after the lead scalars), each named
  // as the format names it: Keras 2 "Adam/dense/kernel/m:0", TF.js
  // "dense/kernel/m" (Keras 3 names by position only).
  std::vector<std::pair<std::string, Tensor>> slots;
};

// Gathers the model's slots (a collective under mpirun). nullopt when the
// optimizer's state is not written, or the model has no slots yet (never
// trained nor resumed).
std::optional<OptimizerVars> optimizer_vars(KerasModel& k, Dialect dialect);

}  // namespace autoshard::keras
