// Saved Keras models as autoshard Models: Keras 3's `.keras` zip
// (config.json + model.weights.h5), Keras 2's legacy `.h5` (model_config
// and model_weights) and TensorFlow.js's `model.json` (modelTopology,
// trainingConfig, weightsManifest and its `.bin` shards).
//
//   KerasModel k = load_keras_model("model.keras");
//   k.model->set_distribution(dist);          // any time before the first step
//   k.model->compile(k.compile.make_optimizer(), k.compile.make_losses(),
//                    k.compile.loss_weights, k.compile.make_metrics());
//
// The architecture is read from Keras's own JSON and each Keras class and
// config field is mapped onto the C++ layers; a field whose value the C++
// layer does not support is an error naming layer, field and value. Code is
// never run: a Lambda layer or a custom (registered) class is refused.
// Weights are read lazily through WeightSources, so each device (MPI rank)
// reads only its own block (HDF5 hyperslabs, byte ranges of a `.bin`).
// See docs/keras-files.md for the layouts, layers and fields supported.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/nn/losses.h"
#include "autoshard/nn/metrics.h"
#include "autoshard/nn/model.h"
#include "autoshard/optim/optimizers.h"

namespace autoshard {

// One input or output of a Keras model.
struct KerasTensorSpec {
  // Inputs: the InputLayer's name (the key of an .npz of inputs, and of
  // ModelInputs). Outputs: the name of the layer that makes it (the key of
  // ModelTargets for several outputs).
  std::string name;
  // Per example, without the batch dimension; -1 where Keras has None (a
  // sequence of any length).
  Shape shape;
  DType dtype = DType::F32;  // F32, or I32 for integer inputs
  std::string keras_dtype;   // as the file says: "float32", "int32", ...
};

// The compile config (Keras 3's compile_config, Keras 2's training_config,
// TF.js's trainingConfig) with Keras 3's names: optimizer classes "Adam",
// "AdamW", "SGD", "RMSprop", "Adagrad"; snake_case keys and losses.
struct KerasCompileConfig {
  bool present = false;   // the file holds one (a model saved uncompiled has none)
  std::string optimizer;  // Keras 3 class name
  nlohmann::json optimizer_config = nlohmann::json::object();  // learning_rate, beta_1, ...
  // One per output, or one for every output: {"name": "sparse_categorical_crossentropy",
  // "from_logits": false, "label_smoothing": 0, "delta": 1} (the keys a loss takes).
  std::vector<nlohmann::json> losses;
  std::vector<double> loss_weights;  // empty: 1 for every output
  std::vector<std::string> metrics;  // Keras names: "accuracy", "mae", ...
  // Where Adam-like optimizers add epsilon: after the bias-corrected root
  // ("after": TF.js's definition) or before the correction ("before":
  // Keras 2 and 3). From the file's format.
  std::string epsilon = "before";

  // The optimizer, losses and metrics as autoshard objects; errors name the
  // unsupported class or field. Without a config: an error naming it.
  std::shared_ptr<Optimizer> make_optimizer() const;
  std::vector<Loss> make_losses() const;
  std::vector<Metric> make_metrics() const;
  // A loss named as Keras's compile takes it ("mse", "MeanSquaredError",
  // "sparse_categorical_crossentropy") in the form `losses` holds.
  static nlohmann::json loss_named(const std::string& name);
};

// Where one model weight lives in each format (what save writes).
struct KerasWeightName {
  std::string cpp;     // the C++ weight path ("dense.kernel")
  std::string layer;   // the model's (top-level) Keras layer holding it
  std::string keras3;  // Keras 3's dataset in model.weights.h5 ("layers/dense/vars/0")
  std::string tfjs;    // TF.js's name ("dense/kernel"); Keras 2's is it + ":0"
};

// An int scalar Keras saves beside a layer's weights that nothing here
// computes with (Normalization's count, which only Keras 2's adapt reads):
// read from the file and written back as it was, because Keras refuses a
// file whose layer has fewer variables than it builds.
struct KerasCounter {
  KerasWeightName name;
  int64_t value = 0;  // 0 where the file had none (as Keras 3's adapt leaves it)
};

struct KerasModel {
  std::unique_ptr<Model> model;
  std::vector<KerasTensorSpec> inputs;
  std::vector<KerasTensorSpec> outputs;
  KerasCompileConfig compile;
  std::string format;         // "keras" (Keras 3 zip), "h5" (legacy HDF5) or "tfjs"
  std::string path;           // the file read
  std::string keras_version;  // of the writer, when the file says
  // The model's architecture in Keras 3's config form (what save writes back).
  nlohmann::json architecture;
  // Every model weight: (C++ weight path, the file's name of it:
  // "layers/dense/vars/0", "dense_1/kernel:0", "dense/kernel").
  std::vector<std::pair<std::string, std::string>> weights;
  // The file holds optimizer state matching the compile config (to resume).
  bool has_optimizer_state = false;
  int64_t iterations = 0;  // the optimizer's step count in the file, 0 when none
  // Why the file's optimizer state was not used ("" when it was, or when
  // not asked for): the optimizer then starts from zero.
  std::string optimizer_state_note;
  // Every model weight's names in the three formats, in the layers' order.
  std::vector<KerasWeightName> weight_names;
  std::vector<KerasCounter> counters;  // in the layers' order
  // The compile config as the file held it (null: none), and `compile` as
  // it was read: save writes the file's own back while `compile` is
  // unchanged, and `compile` in the output format's form once it changed.
  nlohmann::json compile_json;
  KerasCompileConfig compile_as_read;
};

struct KerasLoadOptions {
  // Read the weights (false: the initializers' draws; enough to plan).
  bool weights = true;
  // Also the optimizer's moments, when the file has them and they match the
  // compile config's optimizer (resume); otherwise they start at zero.
  bool optimizer_state = false;
  uint64_t seed = 0;  // of initial draws and dropout
  // Only run forward (predict, evaluate): fields that change training alone
  // (regularizers, constraints, frozen layers) are accepted, not refused.
  bool inference = false;
  // Per input name, the per-example shape for dimensions the file leaves
  // open (None: a sequence of any length); the known ones must agree.
  std::map<std::string, Shape> input_shapes = {};
  // Keep the dimensions the file leaves open (and input_shapes does not
  // give) unknown, -1: the model then traces each batch shape as it comes
  // (keras.Input(shape=(None, 16)) in Python). Without it they are an error.
  bool unknown_dims = false;
};

// Reads a `.keras` file, a `.h5`/`.hdf5` file, a TensorFlow.js `model.json`
// (its weight shards found through weightsManifest, relative to it) or a
// directory holding one of them. Errors are one line naming the file, the
// layer and the field or weight.
KerasModel load_keras_model(const std::string& path, const KerasLoadOptions& options = {});

// The model a Keras config held in memory describes (what Python's models
// hold), as if read from a file of `format` ("keras": Keras 3's form of the
// config; "h5" or "tfjs": Keras 2's), uncompiled, with the initializers'
// draws; or, given `weights_h5`, with the weights of a Keras 3 save_weights
// file (layers/<name>/vars/<i>, as a .keras file's model.weights.h5).
// Errors start with `where` ("save: model 'm'"), followed by the weights
// file's name when one is read ("load_weights: 'w.weights.h5': ...").
KerasModel keras_model_of_config(const nlohmann::json& model_config, const std::string& format,
                                 const std::string& where, const std::string& weights_h5 = "");

// True when `path` is an existing file or directory load_keras_model reads:
// a .keras or .h5 file, a TensorFlow.js model.json (recognised by its
// content: a JSON object with "modelTopology" or "weightsManifest"), or a
// directory holding one. A Hugging Face config.json or a preset name is not.
bool is_keras_model_path(const std::string& path);

// The format a path names: "keras" (.keras), "h5" (.h5, .hdf5), "tfjs" (a
// TensorFlow.js model.json by content, a directory holding one, or, for
// save's output, a model.json or extensionless path not yet there), or ""
// when it names none (any other .json included).
std::string keras_format_of(const std::string& path);

// Writes `model` (its current weights, and the optimizer state when
// `with_optimizer`) to `out` in `format` ("": the one out's extension names,
// else the model's own): a `.keras` zip, a `.h5`, or a TensorFlow.js
// directory (model.json + group1-shard1of1.bin). Atomic: written aside and
// renamed into place; an existing `out` is never replaced (an error).
// Any model is written in any of the three formats: the architecture is
// converted between Keras 3's and Keras 2's forms where they differ
// (docs/keras-files.md, "Converting"). Under mpirun every rank calls it (weights are gathered);
// the leader writes.
void save_keras_model(KerasModel& model, const std::string& out, const std::string& format = "",
                      bool with_optimizer = true);

// Keras 3's save_weights: the model.weights.h5 that save_keras_model would
// put in a .keras file, alone (no optimizer state). The model must have
// Keras 3's weight layout (read from or described as a .keras model).
// Atomic and never replacing `out`, as save_keras_model.
void save_keras_weights(KerasModel& model, const std::string& out);

}  // namespace autoshard
