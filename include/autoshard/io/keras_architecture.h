// A Keras model's architecture in Keras 2's form, the one conversion from
// Keras 3's that the file writers and Python share (docs/keras-files.md,
// "Converting").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace autoshard {

// Keras 2's form (what .h5 files and TensorFlow.js's model.json hold) of a
// Keras 3 model config ({"class_name": "Functional"|"Sequential", "config":
// ...}, config.json less its compile config): plain {class_name, config}
// objects, dtype names, batch_input_shape and [[layer, node, index, {}]]
// inbound nodes. `where` names the model in errors.
nlohmann::json keras2_architecture(const nlohmann::json& keras3_model, const std::string& where);

}  // namespace autoshard
