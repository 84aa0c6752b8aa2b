// Llama-family weights (llama, mistral, qwen2) as Hugging Face ships them: a
// directory with config.json and model.safetensors or sharded
// model-0000k-of-0000N.safetensors with model.safetensors.index.json; names
// `model.layers.N.self_attn.q_proj.weight`, ..., `lm_head.weight`; F32, F16
// or BF16. Every autoshard weight is its checkpoint tensor reshaped (see
// llama.h), so each device reads only its own byte runs.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/keras_hub.h"
#include "autoshard/models/llama/llama.h"

namespace autoshard {

// Each weight path of a model of this config and its Hugging Face tensor name.
std::map<std::string, std::string> llama_hf_names(const LlamaConfig& config);
// Each Hugging Face tensor of a model of this config and its shape there.
std::map<std::string, Shape> llama_hf_shapes(const LlamaConfig& config);
// The config of a Hugging Face directory (its config.json).
LlamaConfig llama_config_of(const std::string& dir);
// Loads weights from a Hugging Face directory or an autoshard checkpoint.
void load_llama_weights(Llama& model, const std::string& path);
// Writes a Hugging Face directory: config.json and model.safetensors, or
// shards with an index (HfSaveOptions: dtype, shard size, overwrite: an
// existing non-empty `dir` is refused without it, and with it only the files
// written are replaced), moved into place only once complete.
void save_hf_llama(Llama& model, const std::string& dir, const HfSaveOptions& options = {});

namespace keras_hub {

class Fields;

// LlamaBackbone (llama), MistralBackbone (mistral), QwenBackbone (qwen2) and
// GemmaBackbone (gemma, gemma2), by config.model_type.
Variables llama_variables(const LlamaConfig& config);
// The backbone's KerasHub config (config.json's "config"); what KerasHub
// cannot express is an error.
nlohmann::json llama_backbone_config(const LlamaConfig& config);
// A KerasHub backbone config read as the Hugging Face config.json fields the
// same model has (keras-hub's convert_llama.py in reverse).
nlohmann::json llama_hf_fields(const std::string& backbone, Fields& fields);

}  // namespace keras_hub

}  // namespace autoshard
