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
#include "autoshard/io/tokenizer.h"
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

// Writes `model` (built from `config`) as a KerasHub preset in `dir`, which
// appears whole or not at all: config.json, metadata.json, task.json,
// model.weights.h5 (and a TextClassifier's task.weights.h5) at the datasets
// KerasHub's loader reads; the tokenizer files of the preset
// `tokenizer_from`, if given. A model KerasHub cannot express (an untied
// OPT, a Llama whose head_dim is not hidden / heads) is an error.
// An existing non-empty `dir` is refused unless `overwrite`, which replaces
// only the files written; a path that is a file is refused.
void save_preset(Model& model, const PresetConfig& config, const std::string& dir,
                 const std::string& tokenizer_from = "", bool overwrite = false);

// Whether the preset has a tokenizer (tokenizer.json and assets/tokenizer/).
bool has_preset_tokenizer(const std::string& dir);
// Its tokenizer: SentencePiece (Gemma, Llama, Mistral: vocabulary.spm),
// byte-level BPE (GPT-2, OPT, RoBERTa: vocabulary.json + merges.txt) or
// WordPiece (BERT: vocabulary.txt, the config's lowercase); encode(text) adds
// the start token KerasHub's preprocessor adds (preprocessor.json's
// add_start_token, true by default); BERT's [CLS] ... [SEP] template.
std::unique_ptr<Tokenizer> load_preset_tokenizer(const std::string& dir);

}  // namespace autoshard::keras_hub
