// GPT-2 weights in the formats the field shares.
//
// Hugging Face: a directory with config.json and model.safetensors (names
// `wte.weight`, `h.N.attn.c_attn.weight` [C, 3C] in Conv1D (in, out) layout,
// ... with or without a `transformer.` prefix; `lm_head.weight` tied or
// absent). Loading maps every autoshard weight onto byte runs of those
// tensors, so each device reads only its own block (query, key and value are
// column ranges of c_attn). The key bias, which autoshard's GPT-2 does not
// have (softmax ignores it), is written as zeros.
//
// llm.c: gpt2_124M.bin: int32[256] header (magic 20240326, version 3, maxT,
// V, L, NH, C, padded V), then the 16 fp32 tensors in llm.c's order, with
// nn.Linear (out, in) matrices.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "autoshard/io/keras_hub.h"
#include "autoshard/models/gpt2/gpt2.h"

namespace autoshard {

// The config of a Hugging Face directory (config.json) or llm.c file (header).
GPT2Config gpt2_config_of(const std::string& path);
// Loads weights from a Hugging Face directory or .safetensors file, an
// autoshard checkpoint directory, or an llm.c .bin file.
void load_gpt2_weights(GPT2& model, const std::string& path);
// Writes a Hugging Face directory (config.json + model.safetensors). A
// directory that exists and is not empty is refused unless `overwrite`, and
// even then only those files are replaced; a path that is a file is refused.
void save_hf_gpt2(GPT2& model, const std::string& dir, bool overwrite = false);
// Writes an llm.c .bin file (version 3, fp32).
void save_llmc_gpt2(GPT2& model, const std::string& file);

namespace keras_hub {

class Fields;

// GPT2Backbone: token_embedding, position_embedding, transformer_layer_N
// (TransformerDecoder), layer_norm.
Variables gpt2_variables(const GPT2Config& config);
// The backbone's KerasHub config (config.json's "config"); what KerasHub
// cannot express is an error.
nlohmann::json gpt2_backbone_config(const GPT2Config& config);
// A KerasHub backbone config read as the Hugging Face config.json fields the
// same model has (keras-hub's convert_gpt2.py in reverse).
nlohmann::json gpt2_hf_fields(Fields& fields);

}  // namespace keras_hub

}  // namespace autoshard
