// BERT (Devlin et al. 2019) and RoBERTa (Liu et al. 2019) encoders with a
// sequence-classification or a masked-LM head, as autoshard Models: post-LayerNorm blocks
// (x = LN(x + attn(x)), x = LN(x + mlp(x))), erf GELU, learned positions
// (RoBERTa's read at position + pad_token_id + 1), token-type embeddings, a
// padding mask over the keys. Padding goes at the end of a sequence (RoBERTa
// reads the pad row's position embedding there, as Hugging Face does).
//
// Inputs (Keras-hub's names): "token_ids" [S] i32, "segment_ids" [S] i32,
// "padding_mask" [S] f32 (1 for a token, 0 for padding). Output: logits
// [batch, num_labels] from the first token ([CLS] / <s>): BERT's pooler
// (dense + tanh) then `classifier`; RoBERTa's classifier.dense + tanh then
// classifier.out_proj. With the masked-LM head, logits [batch, S, vocab]:
// dense + GELU + LayerNorm, then the word embeddings (tied) plus a bias.
//
// Weight paths (N = layer, C = hidden_size, H = heads, D = C / H,
// I = intermediate_size, V = vocab_size, P = max_position_embeddings,
// T = type_vocab_size, L = num_labels); kernels in nn.Linear's (out, in)
// order, so each weight is its checkpoint tensor reshaped:
//   embeddings.(word|position|token_type)_embeddings.embeddings [V|P|T, C]
//   embeddings.LayerNorm.gamma/beta [C]
//   encoder.layer.N.attention.self.(query|key|value).kernel [H, D, C], .bias [H, D]
//     (the key's bias enters as 0 * b: softmax ignores it)
//   encoder.layer.N.attention.output.dense.kernel [C, H, D], .bias [C]
//   encoder.layer.N.attention.output.LayerNorm.gamma/beta [C]
//   encoder.layer.N.intermediate.dense.kernel [I, C], .bias [I]
//   encoder.layer.N.output.dense.kernel [C, I], .bias [C]
//   encoder.layer.N.output.LayerNorm.gamma/beta [C]
//   bert: pooler.dense.kernel [C, C], .bias [C]; classifier.kernel [L, C], .bias [L]
//   roberta: classifier.dense.kernel [C, C], .bias [C]; classifier.out_proj.kernel [L, C], .bias
//   [L]
#pragma once

#include <string>

#include "autoshard/nn/lora.h"
#include "autoshard/nn/model.h"
#include "autoshard/plan/distribution.h"

namespace autoshard {

class ConfigReader;
class ModelFamily;

struct BertConfig {
  std::string model_type = "bert";  // bert or roberta
  int64_t vocab_size = 30522, hidden_size = 768, intermediate_size = 3072;
  int64_t num_hidden_layers = 12, num_attention_heads = 12;
  int64_t max_position_embeddings = 512, type_vocab_size = 2;
  int64_t num_labels = 2;
  int64_t pad_token_id = 0;  // roberta: positions start at pad_token_id + 1
  double layer_norm_eps = 1e-12;
  double dropout = 0.0;    // hidden_dropout_prob, while training
  bool masked_lm = false;  // the head: masked LM (architectures *ForMaskedLM), else classification
  // The masked-LM head's LayerNorm epsilon; 0: layer_norm_eps (Hugging
  // Face's). KerasHub's BertMaskedLM keeps MaskedLMHead's default, 1e-5
  // (keras_hub/src/layers/modeling/masked_lm_head.py).
  double masked_lm_norm_eps = 0;
  // BERT with the masked-LM head keeps its pooler (pooler.dense), frozen
  // and unused, as KerasHub's BertBackbone holds pooled_dense whatever its
  // task; Hugging Face's BertForMaskedLM has none.
  bool masked_lm_keeps_pooler = false;
  // LoRA on the attention's query and value projections; the
  // task's head stays trainable (autoshard/nn/lora.h,
  // KerasHub's Backbone.enable_lora; Python's enable_lora sets it).
  LoraOptions lora = {};

  // A Hugging Face config.json of model_type bert or roberta; num_labels
  // from "num_labels" or "id2label". Other activations, relative position
  // embeddings and the like are errors naming the field.
  static BertConfig from_json_file(const std::string& path);
  static BertConfig from_reader(const ConfigReader& reader);
  void validate() const;
  bool roberta() const { return model_type == "roberta"; }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  // The first position row a sequence reads (RoBERTa's offset).
  int64_t position_offset() const { return roberta() ? pad_token_id + 1 : 0; }
  double masked_lm_epsilon() const {
    return masked_lm_norm_eps > 0 ? masked_lm_norm_eps : layer_norm_eps;
  }
};

// Megatron-LM's layout over `model`: heads and the MLP's hidden units split,
// embeddings split on the vocabulary; norms, positions and heads replicated.
LayoutMap bert_megatron_layout(const std::string& model_axis = "model");

class Bert : public Model {
 public:
  Bert(BertConfig config, int64_t seq_len, uint64_t seed = 0);
  const BertConfig& config() const { return config_; }

 protected:
  Value call(Trace& trace, const std::vector<Value>& inputs) override;

 private:
  struct Block {
    Layer query, key, value, attention_output, attention_norm, intermediate, output, output_norm;
  };
  Value attention(Trace& t, const Block& b, Value x, Value key_bias) const;
  Value classification_head(Trace& t, Value x) const;
  Value masked_lm_head(Trace& t, Value x) const;
  Value first_token(Trace& t, Value x) const;
  BertConfig config_;
  std::vector<Block> blocks_;
};

// The family in the registry (autoshard/models/registry.h).
const ModelFamily& bert_family();

}  // namespace autoshard
