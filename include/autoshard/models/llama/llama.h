// The Llama family as an autoshard Model: Llama 2 and 3 (`llama`), Mistral
// (`mistral`, the same blocks), Qwen2 (`qwen2`, biases on q, k and v),
// Gemma (`gemma`: RMSNorm scaled by 1 + gamma, embeddings scaled by
// sqrt(hidden_size), a GeGLU MLP with tanh GELU, a tied head) and Gemma 2
// (`gemma2`: Gemma's blocks with the attention's output and the MLP's each
// normalized before the residual adds them (four norms a layer), scores
// scaled by query_pre_attn_scalar^-1/2 and soft-capped, a sliding window on
// the even layers, soft-capped logits).
// Pre-RMSNorm blocks; rotary positions in Hugging Face's rotate-half layout
// with rope_theta and Llama 3's rope_scaling; grouped-query attention (kv
// heads fewer than query heads: q is [b, t, kv, group, d], so a plan may
// split the kv heads or the queries of a group, whatever the mesh); a SwiGLU
// MLP; no other biases; the LM head tied to the embedding or not.
//
// Weight paths (N = layer, C = hidden_size, K = num_key_value_heads,
// G = num_attention_heads / K, D = head_dim, I = intermediate_size,
// V = vocab_size); kernels keep Hugging Face's nn.Linear (out, in) order, so
// every weight is its checkpoint tensor, reshaped:
//   embed_tokens.embeddings [V, C]
//   layers.N.input_layernorm.gamma [C]      layers.N.post_attention_layernorm.gamma [C]
//   layers.N.pre_feedforward_layernorm.gamma [C]  layers.N.post_feedforward_layernorm.gamma
//   [C] (gemma2 only; its post_attention_layernorm normalizes the attention's output)
//   layers.N.self_attn.q_proj.kernel [K, G, D, C]  (.bias [K, G, D]: qwen2)
//   layers.N.self_attn.k_proj.kernel [K, D, C]     (.bias [K, D]: qwen2); v_proj alike
//   layers.N.self_attn.o_proj.kernel [C, K, G, D]
//   layers.N.mlp.gate_proj.kernel [I, C]   up_proj [I, C]   down_proj [C, I]
//   norm.gamma [C]    lm_head.kernel [V, C] (absent when tied)
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autoshard/nn/model.h"
#include "autoshard/plan/distribution.h"

namespace autoshard {

class ConfigReader;
class DecoderConfig;
class ModelFamily;

struct LlamaConfig {
  std::string model_type = "llama";  // llama, mistral, qwen2, gemma or gemma2
  int64_t vocab_size = 32000, hidden_size = 4096, intermediate_size = 11008;
  int64_t num_hidden_layers = 32, num_attention_heads = 32, num_key_value_heads = 32;
  int64_t head_dim = 128;  // hidden_size / num_attention_heads unless the config says
  int64_t max_position_embeddings = 4096;
  int64_t sliding_window = 0;  // mistral: keys further back than this are not seen; 0: none
  double rms_norm_eps = 1e-6, rope_theta = 10000;
  // rope_scaling {"rope_type": "llama3", ...}: factor 0 when absent.
  double rope_factor = 0, rope_low_freq_factor = 1, rope_high_freq_factor = 4;
  double rope_original_max_positions = 8192;
  bool attention_bias = false;  // q, k, v biases (qwen2: always)
  bool tie_word_embeddings = false;
  // The MLP's gate activation: silu (SwiGLU), gelu_pytorch_tanh or gelu
  // (GeGLU; gemma's hidden_activation).
  std::string hidden_act = "silu";
  double norm_gamma_offset = 0;   // gemma: RMSNorm scales by 1 + gamma
  bool scale_embeddings = false;  // gemma: embeddings times sqrt(hidden_size)
  // Gemma 2 (Hugging Face's field names; 0 where its config says null):
  // scores are q . k / sqrt(query_pre_attn_scalar) (0: head_dim), then
  // attn_logit_softcapping * tanh(score / attn_logit_softcapping); the
  // logits alike with final_logit_softcapping (0: no cap).
  double query_pre_attn_scalar = 0;
  double attn_logit_softcapping = 0, final_logit_softcapping = 0;
  // Per layer "sliding_attention" (sliding_window applies) or
  // "full_attention"; empty: sliding_window applies to every layer.
  // Gemma 2: sliding on the even layers (0, 2, ...).
  std::vector<std::string> layer_types;
  // gemma2: post_attention_layernorm normalizes the attention's output and
  // pre_/post_feedforward_layernorm the MLP's input and output, each before
  // the residual add.
  bool post_norms = false;
  // LoRA (KerasHub's Backbone.enable_lora, Keras's EinsumDense.enable_lora):
  // rank > 0 adds to the query and value projections the adapters
  // lora_kernel_a [C, heads, rank] and lora_kernel_b [rank, head_dim], the
  // kernel plus lora_alpha / rank * a @ b, and freezes every other weight.
  int64_t lora_rank = 0;
  double lora_alpha = 0;

  // A Hugging Face config.json of model_type llama, mistral or qwen2. Values
  // this code does not run (another activation, a rope scaling other than
  // llama3, MLP biases) are errors naming the field.
  static LlamaConfig from_json_file(const std::string& path);
  static LlamaConfig from_json_text(const std::string& text, const std::string& source);
  static LlamaConfig from_reader(const ConfigReader& reader);
  void validate() const;
  int64_t group() const { return num_attention_heads / num_key_value_heads; }
  // The sliding window of layer `layer` (0: it sees every earlier key).
  int64_t window_of(int64_t layer) const;
  // The attention scores' scale: 1 / sqrt(query_pre_attn_scalar or head_dim).
  double attention_scale() const;
};

// Megatron-LM's layout over `model`: kv heads (and with them their queries),
// the MLP's hidden units and the vocabulary split; norms replicated. Keys
// only for the weights a model of `config` has (biases, an untied head).
LayoutMap llama_megatron_layout(const LlamaConfig& config, const std::string& model_axis = "model");

class Llama : public Model {
 public:
  Llama(LlamaConfig config, int64_t seq_len, uint64_t seed = 0);
  const LlamaConfig& config() const { return config_; }

 protected:
  Value call(Trace& trace, const std::vector<Value>& inputs) override;

 private:
  struct Block {
    Layer input_layernorm, q_proj, k_proj, v_proj, o_proj, post_attention_layernorm;
    Layer gate_proj, up_proj, down_proj;
    Layer pre_feedforward_layernorm, post_feedforward_layernorm;  // called with post_norms only
  };
  Value attention(Trace& t, const Block& b, Value x, Value positions, int64_t window) const;
  Value block(Trace& t, const Block& b, Value x, Value positions, int64_t layer) const;
  Value activation(Value gate) const;
  LlamaConfig config_;
  Layer embed_tokens_, norm_;
  std::vector<Block> blocks_;
};

// The family in the registry (autoshard/models/registry.h).
const ModelFamily& llama_family();
// A LlamaConfig as the registry's decoder config (a LoRA model's, from
// Python's enable_lora).
std::shared_ptr<const DecoderConfig> llama_decoder(LlamaConfig config);

}  // namespace autoshard
