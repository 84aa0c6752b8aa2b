// The compile config of the three formats normalised to Keras 3's names.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/io/keras_model.h"
#include "io/keras/architecture.h"

namespace autoshard::keras {

// Keras 3's compile_config, Keras 2's training_config or TF.js's
// trainingConfig (null: none). Errors name the field.
KerasCompileConfig read_compile_config(const nlohmann::json& config, Dialect dialect,
                                       const std::string& where);

}  // namespace autoshard::keras
