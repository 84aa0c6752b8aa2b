// Keras layer classes and their config fields mapped onto the C++ layers.
// Every field is read or checked: a value the C++ layer does not support is
// an error naming the layer, the field and the value, never ignored.
// Initializers are accepted as they are (the file's weights replace the
// draws); regularizers, constraints and frozen layers change training, so
// they are refused unless the model is only run forward.
#pragma once

#include <string>
#include <vector>

#include "autoshard/nn/layers.h"
#include "io/keras/architecture.h"

namespace autoshard::keras {

// One weight of a layer, in Keras's order of the layer's variables
// (trainable ones first, as Keras saves them).
struct WeightRole {
  std::string cpp;   // the C++ path relative to the layer ("kernel", "forward_lstm.kernel")
  std::string k3;    // Keras 3's dataset relative to the layer's group ("vars/0", "cell/vars/1")
  std::string tfjs;  // TF.js's name relative to the layer ("kernel", "forward_lstm/kernel")
};

struct BuildContext {
  Dialect dialect = Dialect::Keras3;
  bool inference = false;  // accept training-only fields (regularizers, constraints)
  std::string where;       // the file, for errors
  uint64_t seed = 0;
};

struct BuiltLayer {
  Layer layer;
  std::vector<WeightRole> weights;
};

// The C++ layer of a Keras layer (a nested model included). Throws naming
// layer, field and value.
BuiltLayer build_layer(const LayerSpec& spec, const BuildContext& ctx);

// The activation autoshard applies for a Keras activation value (a name, or
// Keras 3's serialized function), checked; "" for linear.
std::string activation_of(const nlohmann::json& value, const std::string& layer,
                          const std::string& field, const BuildContext& ctx);

}  // namespace autoshard::keras
