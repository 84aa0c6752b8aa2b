// One Keras layer from its config, through the Keras layer table the .keras,
// .h5 and TF.js readers use (src/io/keras/layer_table.h): how Python's
// keras.layers classes make their layers.
//
//   Layer pool = keras_layer("MaxPooling2D", {{"name", "pool"}, {"pool_size", {2, 2}}});
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/nn/layers.h"

namespace autoshard {

// The layer of Keras class `class_name` whose config (as Keras 3's
// get_config gives it; "name" names the layer) is `config`, for training;
// `seed` seeds its random draws (Dropout's masks). Errors name the layer,
// the field and the value, as for a file ("keras.layers: layer 'pool'
// (MaxPooling2D): field 'padding' = ...").
Layer keras_layer(const std::string& class_name, const nlohmann::json& config, uint64_t seed = 0);

}  // namespace autoshard
