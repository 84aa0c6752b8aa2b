// Phi-3 (Hugging Face model_type phi3, KerasHub's Phi3Backbone): Llama's
// blocks (autoshard/models/llama/llama.h: pre-RMSNorm, rotate-half rotary
// positions, grouped-query attention, a SwiGLU MLP, no biases, an untied
// head), run by the Llama model with LlamaConfig::model_type "phi3". What
// makes it a family of its own is its checkpoints: Hugging Face's Phi-3
// fuses q, k and v into one `self_attn.qkv_proj` and the MLP's gate and up
// projections into one `mlp.gate_up_proj` (transformers'
// models/phi3/modeling_phi3.py, Phi3Attention and Phi3MLP), and KerasHub
// names its layers its own way (keras-hub's models/phi3/phi3_decoder.py).
//
//   LanguageModelConfig c = LanguageModelConfig::of("Phi-3-mini-4k-instruct/");
//   std::unique_ptr<Model> phi3 = c.build(/*seq_len=*/512, /*seed=*/0);
//
// Rope scaling ("longrope"/"su", the 128k models) and partial rotary
// factors below 1 are refused by name; so is dropout, which autoshard's
// Llama blocks do not have.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/keras_hub.h"
#include "autoshard/models/llama/llama.h"

namespace autoshard {

class ConfigReader;
class ModelFamily;

// A Phi-3 config.json read as the Llama config of the same model
// (model_type "phi3"); fields this code does not run are errors naming them.
LlamaConfig phi3_config(const ConfigReader& reader);

// Each weight path of a Phi-3 model and the Hugging Face tensor holding it
// (two or three weights share a fused tensor).
std::map<std::string, std::string> phi3_hf_names(const LlamaConfig& config);
// Loads weights from a Hugging Face Phi-3 directory or an autoshard checkpoint.
void load_phi3_weights(Llama& model, const std::string& path);
// Writes a Hugging Face Phi-3 directory (fused tensors), as save_hf_llama does.
void save_hf_phi3(Llama& model, const std::string& dir, const HfSaveOptions& options = {});

// The family in the registry (autoshard/models/registry.h).
const ModelFamily& phi3_family();

namespace keras_hub {

class Fields;

// Phi3Backbone's variables, its config, and its config read as Hugging
// Face's fields (keras-hub's utils/transformers/convert_phi3.py in reverse).
Variables phi3_variables(const LlamaConfig& config);
nlohmann::json phi3_backbone_config(const LlamaConfig& config);
nlohmann::json phi3_hf_fields(Fields& fields);

}  // namespace keras_hub

}  // namespace autoshard
