// OPT weights as Hugging Face ships them: a directory with config.json and
// model.safetensors (or shards with model.safetensors.index.json); names
// `model.decoder.layers.N.self_attn.q_proj.weight`, ...,
// `model.decoder.embed_positions.weight` (all max_position_embeddings + 2
// rows), `lm_head.weight` only when untied; F32, F16 or BF16. Every autoshard
// weight is its checkpoint tensor reshaped (see opt.h).
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/keras_hub.h"
#include "autoshard/models/opt/opt.h"

namespace autoshard {

// Each weight path of a model of this config and its Hugging Face tensor name.
std::map<std::string, std::string> opt_hf_names(const OPTConfig& config);
// Loads weights from a Hugging Face directory or an autoshard checkpoint.
void load_opt_weights(OPT& model, const std::string& path);
// Writes a Hugging Face directory: config.json and model.safetensors, or
// shards with an index (HfSaveOptions: dtype, shard size, overwrite: an
// existing non-empty `dir` is refused without it, and with it only the files
// written are replaced), moved into place only once complete.
void save_hf_opt(OPT& model, const std::string& dir, const HfSaveOptions& options = {});

namespace keras_hub {

class Fields;

// OPTBackbone: embeddings/{token,position}_embedding, transformer_layer_N,
// layer_norm; the head is tied (KerasHub has no untied OPT).
Variables opt_variables(const OPTConfig& config);
// The backbone's KerasHub config (config.json's "config"); what KerasHub
// cannot express is an error.
nlohmann::json opt_backbone_config(const OPTConfig& config);
// A KerasHub backbone config read as the Hugging Face config.json fields the
// same model has (keras-hub's convert_opt.py in reverse).
nlohmann::json opt_hf_fields(Fields& fields);

}  // namespace keras_hub

}  // namespace autoshard
