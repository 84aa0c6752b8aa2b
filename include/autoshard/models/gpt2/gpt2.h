// GPT-2 (Radford et al. 2019) as an autoshard Model: pre-LayerNorm blocks,
// learned positions, gelu with the tanh approximation, and an LM head tied to
// the token embedding.
//
// Weight paths (B = block index, shapes with C = n_embd, H = n_head,
// D = C / H, V = vocab_size, P = n_positions):
//   wte.embeddings [V, C]          wpe.embeddings [P, C]
//   h.B.ln_1.gamma/beta [C]        h.B.ln_2.gamma/beta [C]
//   h.B.attn.query.kernel [C, H, D] and .bias [H, D]; likewise value; key has
//     no bias (it cannot change any softmax; see docs/weights.md)
//   h.B.attn.attention_output.kernel [H, D, C] and .bias [C]
//   h.B.mlp.c_fc.kernel [C, 4C] and .bias [4C]
//   h.B.mlp.c_proj.kernel [4C, C] and .bias [C]
//   ln_f.gamma/beta [C]
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

struct GPT2Config {
  int64_t n_layer = 12, n_head = 12, n_embd = 768, vocab_size = 50257, n_positions = 1024;
  double dropout = 0.0;  // resid, embedding and attention dropout
  double layer_norm_epsilon = 1e-5;
  // LoRA on the attention's query and value projections (autoshard/nn/lora.h,
  // KerasHub's Backbone.enable_lora; Python's enable_lora sets it).
  LoraOptions lora = {};

  // "test" (2 layers, 3 heads, width 24, vocabulary 67: awkward on purpose),
  // "tiny" and "mini" (byte vocabulary), "gpt2", "gpt2-medium", "gpt2-large",
  // "gpt2-xl".
  static GPT2Config preset(const std::string& name);
  // A Hugging Face GPT-2 config.json (n_layer, n_head, n_embd, vocab_size,
  // n_positions, resid_pdrop, layer_norm_epsilon).
  static GPT2Config from_json_file(const std::string& path);
  // The same from a config's text (`source` names it in errors). Sizes must
  // be whole numbers from 1 to 2^31 - 1; fields that would describe another
  // model (model_type, activation_function, n_inner, ...) are errors.
  static GPT2Config from_json_text(const std::string& text, const std::string& source);
  static GPT2Config from_reader(const ConfigReader& reader);
  void validate() const;
  int64_t head_dim() const { return n_embd / n_head; }
};

// Megatron-LM's tensor-parallel layout for these paths over mesh axis
// `model`: heads, MLP hidden and vocabulary split; the residual width, layer
// norms and the biases after the row-split projections replicated.
LayoutMap gpt2_megatron_layout(const std::string& model_axis = "model");

class GPT2 : public Model {
 public:
  GPT2(GPT2Config config, int64_t seq_len, uint64_t seed = 0);
  const GPT2Config& config() const { return config_; }

 protected:
  Value call(Trace& trace, const std::vector<Value>& inputs) override;

 private:
  struct Block {
    Layer ln_1, attn, ln_2, c_fc, c_proj;
  };
  GPT2Config config_;
  Layer wte_, wpe_, ln_f_;
  std::vector<Block> blocks_;
};

// The family in the registry (autoshard/models/registry.h).
const ModelFamily& gpt2_family();
// The registry's config of a GPT-2 (src/models/gpt2/family.cc).
std::shared_ptr<const DecoderConfig> gpt2_decoder(GPT2Config config);

}  // namespace autoshard
