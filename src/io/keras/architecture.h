// A Keras model's architecture as the three formats write it, read into one
// form: layers with their class, config and the calls made on them
// (inbound nodes), the model's inputs and outputs, and nested models.
//
//   Keras 3 (config.json of a .keras): {"module", "class_name", "config",
//     "registered_name", "build_config", "compile_config"}; functional
//     inbound_nodes are [{"args": [__keras_tensor__ ...], "kwargs": {}}]
//     whose tensors name their source by "keras_history": [layer, node, i].
//   Keras 2 (.h5 model_config) and TensorFlow.js (modelTopology):
//     inbound_nodes are [[[layer, node, i, kwargs], ...], ...].
// Sequential models become chains. Code-bearing layers (Lambda, custom
// registered classes) are refused here, naming the layer and the class.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard::keras {

enum class Dialect { Keras3, Keras2, TFJS };

struct TensorRef {
  std::string layer;
  int node = 0;    // which call of the layer
  int tensor = 0;  // which output of that call
};

struct ModelSpec;

struct LayerSpec {
  std::string cls, name;
  nlohmann::json config;
  // One entry per call of the layer (shared layers have several): the
  // tensors it was called on.
  std::vector<std::vector<TensorRef>> calls;
  std::shared_ptr<ModelSpec> nested;  // a Sequential or Functional model used as a layer
  // Keras 3's group of this layer in model.weights.h5, relative to its
  // container ("layers/conv2d_1"): by class name and count, not layer name.
  std::string saved_group;
  // Keras 3 call arguments that are not tensors (Attention's
  // use_causal_mask, ...), the same for every call: the layer table's
  // builders read them as fields of the config (build_layer).
  nlohmann::json call_kwargs = nlohmann::json::object();
};

struct InputLayerSpec {
  std::string name;
  Shape shape;  // without the batch; -1 for None
  std::string dtype = "float32";
};

struct ModelSpec {
  std::string name;
  bool sequential = false;
  std::vector<InputLayerSpec> inputs;
  std::vector<LayerSpec> layers;  // InputLayers excluded
  std::vector<TensorRef> outputs;
};

// The most models nested in one another a model file may hold (real ones
// nest a few; docs/keras-files.md, "Limits of a model file").
constexpr int kMaxModelNesting = 128;
// The most layers a model file may hold, nested models' included.
constexpr int64_t kMaxLayers = 1'000'000;

// Parses a model config ({"class_name": "Sequential"|"Functional"|"Model", "config": ...}).
// `where` names the file for errors. Models nested deeper than
// kMaxModelNesting, or more than kMaxLayers layers, are errors.
ModelSpec parse_model(const nlohmann::json& model, Dialect dialect, const std::string& where);

// The architecture `model` ({"class_name", "config", ...}) of a file in
// dialect `from` rewritten in dialect `to`'s form (docs/keras-files.md,
// "Converting"): Keras 3's config objects ({module, class_name, config,
// registered_name}), DTypePolicy dtypes, InputLayer batch_shape and
// {"args": [__keras_tensor__ ...], "kwargs"} inbound nodes, against Keras 2's
// and TF.js's plain {class_name, config}, dtype strings, batch_input_shape
// and [[layer, node, index, kwargs], ...] inbound nodes. The same dialect:
// returned unchanged. `model` must have been read by parse_model.
nlohmann::json convert_architecture(const nlohmann::json& model, Dialect from, Dialect to);

// Keras's naming.to_snake_case of a class name ("Conv2DTranspose" -> "conv2d_transpose").
std::string snake_case(const std::string& class_name);

}  // namespace autoshard::keras
