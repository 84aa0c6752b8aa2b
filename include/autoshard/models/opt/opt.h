// OPT (Zhang et al. 2022, Meta's Open Pre-trained Transformers) as an
// autoshard Model: pre-LayerNorm decoder blocks, learned positions read with
// OPT's offset of 2 (position p is row p + 2 of embed_positions), ReLU MLP,
// biases on every projection, the LM head tied to the embedding unless the
// config says otherwise.
//
// Weight paths (N = layer, C = hidden_size, H = num_attention_heads,
// D = C / H, F = ffn_dim, V = vocab_size, P = max_position_embeddings);
// kernels in nn.Linear's (out, in) order, so every weight is its checkpoint
// tensor reshaped:
//   embed_tokens.embeddings [V, C]     embed_positions.embeddings [P + 2, C]
//   layers.N.self_attn_layer_norm.gamma/beta [C]
//   layers.N.self_attn.(q|k|v)_proj.kernel [H, D, C] and .bias [H, D] (k's bias
//     enters as 0 * bias: softmax ignores it, so its gradient is exactly zero)
//   layers.N.self_attn.out_proj.kernel [C, H, D] and .bias [C]
//   layers.N.final_layer_norm.gamma/beta [C]
//   layers.N.fc1.kernel [F, C] and .bias [F]   layers.N.fc2.kernel [C, F] and .bias [C]
//   final_layer_norm.gamma/beta [C]    lm_head.kernel [V, C] (absent when tied)
#pragma once

#include <memory>
#include <string>

#include "autoshard/nn/lora.h"
#include "autoshard/nn/model.h"
#include "autoshard/plan/distribution.h"

namespace autoshard {

class ConfigReader;
class DecoderConfig;
class ModelFamily;

struct OPTConfig {
  int64_t vocab_size = 50272, hidden_size = 768, ffn_dim = 3072;
  int64_t num_hidden_layers = 12, num_attention_heads = 12;
  int64_t max_position_embeddings = 2048;
  double dropout = 0.0;  // on the embeddings' sum and each block's two outputs
  bool tie_word_embeddings = true;
  // LoRA on the attention's query and value projections (autoshard/nn/lora.h,
  // KerasHub's Backbone.enable_lora; Python's enable_lora sets it).
  LoraOptions lora = {};

  // A Hugging Face config.json of model_type "opt". What this code does not
  // run is an error naming the field: post-LayerNorm blocks
  // (do_layer_norm_before false, OPT-350m), word_embed_proj_dim other than
  // hidden_size, an activation other than relu, no biases, LayerNorms
  // without affine parameters.
  static OPTConfig from_json_file(const std::string& path);
  static OPTConfig from_reader(const ConfigReader& reader);
  void validate() const;
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

// Megatron-LM's layout over `model`: heads, the MLP's hidden units and the
// vocabulary split; LayerNorms, positions and the biases after row-split
// projections replicated.
LayoutMap opt_megatron_layout(const OPTConfig& config, const std::string& model_axis = "model");

class OPT : public Model {
 public:
  // OPT reads positions p + 2 of its position table.
  static constexpr int64_t kPositionOffset = 2;

  OPT(OPTConfig config, int64_t seq_len, uint64_t seed = 0);
  const OPTConfig& config() const { return config_; }

 protected:
  Value call(Trace& trace, const std::vector<Value>& inputs) override;

 private:
  struct Block {
    Layer self_attn_layer_norm, q_proj, k_proj, v_proj, out_proj, final_layer_norm, fc1, fc2;
  };
  OPTConfig config_;
  Layer embed_tokens_, final_layer_norm_;
  std::vector<Block> blocks_;
};

// The family in the registry (autoshard/models/registry.h).
const ModelFamily& opt_family();
// The registry's config of an OPT (src/models/opt/family.cc).
std::shared_ptr<const DecoderConfig> opt_decoder(OPTConfig config);

}  // namespace autoshard
