// What `autoshard predict`, `evaluate` and `train --model FILE.keras` share:
// the model file, its compile config with the flags that override it, and
// its layout over devices.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/io/keras_model.h"
#include "cli/options.h"

namespace autoshard::cli {

// Flags that replace parts of the file's compile config.
struct KerasOverrides {
  std::string loss;       // a Keras loss name for every output
  std::string optimizer;  // a Keras optimizer name, with its defaults
  std::optional<double> lr;
};

// --model, --batch, --seed and the mesh flags (--mesh, --devices, --plan,
// --cluster, --memory-per-device, --plan-time) of predict and evaluate.
void add_keras_common(CLI::App* cmd, CommonOptions& o, int64_t default_batch);
// --loss and --optimizer.
void add_keras_overrides(CLI::App* cmd, KerasOverrides& o, bool with_optimizer);

// True when `path` names a saved Keras model: a .keras, .h5 or .hdf5 file, a
// TensorFlow.js .json holding "modelTopology", or a directory with a
// model.json. (A Hugging Face config.json or a GPT preset name is not.)
bool names_keras_model(const std::string& path);

// Reads --model, which must name a Keras file (.keras, .h5, model.json or a
// directory holding one).
KerasModel load_keras_for(const CommonOptions& o, const KerasLoadOptions& load);

// Compiles the model with the file's compile config as overridden.
// `training`: the optimizer is needed too.
struct KerasCompiled {
  std::vector<std::string> losses;  // each output's loss name (or one for all), for the targets
  std::shared_ptr<Optimizer> optimizer;
};
KerasCompiled compile_keras(KerasModel& k, const KerasOverrides& over, bool training);

// The distribution the mesh flags ask for (null: one device). With
// --devices and --plan auto, AutoShard chooses the mesh's shape for the
// graph `step` returns. Megatron's layouts name GPT weights: an error here.
std::shared_ptr<Distribution> keras_distribution(const CommonOptions& o, Model& model,
                                                 const std::function<Graph()>& step);

}  // namespace autoshard::cli
