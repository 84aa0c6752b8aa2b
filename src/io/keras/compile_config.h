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

// `config` in a format's own form (the inverse of read_compile_config):
// Keras 3's compile_config, Keras 2's training_config or TF.js's
// trainingConfig. Throws naming what the format cannot express (AdamW or
// from_logits in TF.js).
nlohmann::json write_compile_config(const KerasCompileConfig& config, Dialect dialect,
                                    const std::string& where);

// The same optimizer, losses, loss weights and metrics.
bool same_compile_config(const KerasCompileConfig& a, const KerasCompileConfig& b);

}  // namespace autoshard::keras
