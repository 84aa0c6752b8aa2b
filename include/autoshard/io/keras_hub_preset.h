// KerasHub preset directories as a model: config.json (the backbone's
// class_name and config), task.json (a CausalLM or TextClassifier; its
// num_classes), model.weights.h5 or a model.weights.json index over
// *.weights.h5 shards, task.weights.h5 for a classifier's head. Each weight
// reads only the device's share of its Keras variable (HDF5 hyperslabs),
// through the table of keras_hub.h. See docs/keras-hub.md.
#pragma once

#include <string>
#include <variant>

#include "autoshard/io/keras_hub.h"
#include "autoshard/nn/model.h"

namespace autoshard::keras_hub {

using PresetConfig = std::variant<GPT2Config, LlamaConfig, OPTConfig, BertConfig>;

// Whether `dir` is a directory whose config.json describes a KerasHub
// backbone (a "class_name" and "config", module keras_hub...).
bool is_preset(const std::string& dir);
// The autoshard config of a preset's backbone (and task). A config field
// autoshard does not run, or an unknown one, is an error naming it.
PresetConfig preset_config(const std::string& dir);
// The variable table for a model of that config.
Variables variables_of(const PresetConfig& config);
// Loads a model built from preset_config(dir): every weight from its Keras
// variable, checked by shape; a missing dataset or file is an error naming
// it. An error leaves the model as it was.
void load_preset_weights(Model& model, const std::string& dir, const Variables& variables);
// The same, the table chosen by the model's class (GPT2, Llama, OPT, Bert).
void load_preset_weights(Model& model, const std::string& dir);

}  // namespace autoshard::keras_hub
