// KerasHub preset directories as a model: config.json (the backbone's
// class_name and config), task.json (a CausalLM or TextClassifier; its
// num_classes), model.weights.h5 or a model.weights.json index over
// *.weights.h5 shards, task.weights.h5 for a classifier's head. Each weight
// reads only the device's share of its Keras variable (HDF5 hyperslabs),
// through the table of keras_hub.h. See docs/keras-hub.md. What a preset's
// config means is each model family's (autoshard/models/keras_hub_model.h).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "autoshard/io/keras_hub.h"
#include "autoshard/io/tokenizer.h"
#include "autoshard/nn/model.h"

namespace autoshard::keras_hub {

// Whether `dir` is a directory whose config.json describes a KerasHub
// backbone (a "class_name" and "config", module keras_hub...).
bool is_preset(const std::string& dir);
// A preset's JSON file (config.json, task.json) parsed; `what` names it in
// errors. Reading it as a model's config is the families'
// (autoshard/models/keras_hub_model.h).
nlohmann::json read_preset_json(const std::string& path, const std::string& what);

// Loads a model from the preset in `dir` through its variable table
// (autoshard/models/keras_hub_model.h gives the table of a model's family):
// every weight from its Keras variable, checked by shape; a missing dataset
// or file is an error naming it. An error leaves the model as it was.
void load_preset_weights(Model& model, const std::string& dir, const Variables& variables);

// Writes `model` as a KerasHub preset in `dir`, which appears whole or not
// at all: config.json (`backbone_config`, the backbone's KerasHub config),
// metadata.json, task.json (its config plus `task_fields`; a non-empty
// `task_fields` means a TextClassifier, whose task.weights.h5 is written
// too), model.weights.h5 at the datasets of `variables`; the tokenizer files
// of the preset `tokenizer_from`, if given. An existing non-empty `dir` is
// refused unless `overwrite`, which replaces only the files written; a path
// that is a file is refused. A backbone of more than `max_shard_gb` GB
// (> 0; KerasHub's save_to_preset(max_shard_size)) is written in shards,
// model_00000.weights.h5, ..., listed by model.weights.json, as Keras's
// ShardedH5IOStore writes them (keras/src/saving/saving_lib.py).
void save_preset(Model& model, const Variables& variables, const nlohmann::json& backbone_config,
                 const nlohmann::json& task_fields, const std::string& dir,
                 const std::string& tokenizer_from = "", bool overwrite = false,
                 double max_shard_gb = 0);

// Whether the preset has a tokenizer (tokenizer.json and assets/tokenizer/).
bool has_preset_tokenizer(const std::string& dir);
// Its tokenizer: SentencePiece (Gemma, Llama, Mistral: vocabulary.spm),
// byte-level BPE (GPT-2, OPT, RoBERTa: vocabulary.json + merges.txt) or
// WordPiece (BERT: vocabulary.txt, the config's lowercase); encode(text) adds
// the start token KerasHub's preprocessor adds (preprocessor.json's
// add_start_token, true by default); BERT's [CLS] ... [SEP] template.
std::unique_ptr<Tokenizer> load_preset_tokenizer(const std::string& dir);

}  // namespace autoshard::keras_hub
