// BERT and RoBERTa sequence classifiers as Hugging Face ships them
// (BertForSequenceClassification, RobertaForSequenceClassification): a
// directory with config.json and model.safetensors (or shards with an
// index); names `bert.encoder.layer.N.attention.self.query.weight`, ...,
// `classifier.weight` (RoBERTa: `roberta.` and `classifier.dense`,
// `classifier.out_proj`). F32, F16 or BF16. A checkpoint of the bare encoder
// or with another head (no classifier tensors) is an error naming them.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/keras_hub.h"
#include "autoshard/models/bert/bert.h"

namespace autoshard {

// The config of a Hugging Face directory (its config.json).
BertConfig bert_config_of(const std::string& dir);
// Each weight path of a model of this config and its Hugging Face tensor name.
std::map<std::string, std::string> bert_hf_names(const BertConfig& config);
// Loads weights from a Hugging Face directory or an autoshard checkpoint.
void load_bert_weights(Bert& model, const std::string& path);
// Writes a Hugging Face directory (config.json and the weights); an existing
// non-empty `dir` only with options.overwrite, which keeps other files.
void save_hf_bert(Bert& model, const std::string& dir, const HfSaveOptions& options = {});

namespace keras_hub {

class Fields;

// The epsilon of KerasHub's MaskedLMHead's LayerNorm (its default, which
// BertMaskedLM keeps: keras_hub/src/layers/modeling/masked_lm_head.py).
inline constexpr double keras_hub_masked_lm_epsilon = 1e-5;

// BertBackbone / RobertaBackbone with the TextClassifier head (BERT: the
// backbone's pooled_dense then logits; RoBERTa: pooled_dense and logits, both
// in the task), or BertBackbone with BertMaskedLM's head (mlm_head, in the
// task; its config masked_lm with masked_lm_keeps_pooler and the head's
// epsilon keras_hub_masked_lm_epsilon). RoBERTa's masked LM is not mapped.
Variables bert_variables(const BertConfig& config);
// The backbone's KerasHub config (config.json's "config"); what KerasHub
// cannot express is an error.
nlohmann::json bert_backbone_config(const BertConfig& config);
// A KerasHub backbone config read as the Hugging Face config.json fields the
// same model has (keras-hub's convert_bert.py in reverse).
nlohmann::json bert_hf_fields(Fields& fields, bool roberta);

}  // namespace keras_hub

}  // namespace autoshard
