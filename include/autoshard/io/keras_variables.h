// The Keras 3 variable of every weight of a saved Keras model: the path
// `variable.path` has when a Keras 3 user loads the same file
// (keras.models.load_model), for exporting autoshard's plan as a Keras
// LayoutMap (plan/layout_map_export.h).
//
// Keras 3 names a variable `<scopes>/<layer name>/<variable name>`, the
// scopes being the layers whose build or call created it: a Sequential
// builds its layers inside its own scope ("sequential/dense/kernel"), a
// Functional model calls them outside any ("dense/kernel"), a recurrent
// layer builds its cell inside its own ("lstm/lstm_cell/kernel"), a
// Bidirectional its two copies ("bidirectional/forward_lstm/lstm_cell/
// kernel"). A model built another way can add or drop the model scopes,
// so each key accepts the path with and without them (anchored, so it
// matches nothing else); DepthwiseConv2D's kernel is "kernel" in Keras 3.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autoshard/io/keras_hub.h"
#include "autoshard/io/keras_model.h"
#include "plan/layout_map_export.h"

namespace autoshard {

// Every weight of `model` (in its weight_names order) as a Keras variable:
// its Keras 3 path, the spellings with and without model scopes, a key
// matching exactly those, and its shape from `weight_shapes` (by autoshard
// weight path; Keras's dimensions are autoshard's).
std::vector<KerasVariable> keras_file_variables(const KerasModel& model,
                                                const std::map<std::string, Shape>& weight_shapes);

// Every variable of a KerasHub backbone (and task head) `table` (a model
// family's, LanguageModelConfig::keras_hub_variables()), keyed by its exact path;
// each autoshard dimension lies in the Keras dimension keras_dims() names
// (a query kernel's split over its heads splits the heads dimension).
// `weight_shapes` (the plan's, by autoshard path) must agree with the
// table. `class_name` receives the backbone's class.
std::vector<KerasVariable> keras_hub_variables(const keras_hub::Variables& table,
                                               const std::map<std::string, Shape>& weight_shapes,
                                               std::string* class_name = nullptr);

}  // namespace autoshard
