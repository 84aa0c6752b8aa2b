#include "autoshard/models/llama/llama.h"

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/lora.h"
#include "models/hf_layers.h"

namespace autoshard {

LayoutMap llama_megatron_layout(const LlamaConfig& c, const std::string& m) {
  LayoutMap map;
  const std::optional<std::string> model = m, none;
  map["^embed_tokens\\.embeddings$"] = {model, none};
  if (!c.tie_word_embeddings) map["^lm_head\\.kernel$"] = {model, none};
  map["self_attn\\.q_proj\\.kernel$"] = {model, none, none, none};
  if (c.attention_bias) map["self_attn\\.q_proj\\.bias$"] = {model, none, none};
  map["self_attn\\.(k|v)_proj\\.kernel$"] = {model, none, none};
  if (c.attention_bias) map["self_attn\\.(k|v)_proj\\.bias$"] = {model, none};
  map["self_attn\\.o_proj\\.kernel$"] = {none, model, none, none};
  map["mlp\\.(gate|up)_proj\\.kernel$"] = {model, none};
  map["mlp\\.down_proj\\.kernel$"] = {none, model};
  map["self_attn\\.(key|value)_cache$"] = {none, none, model, none};  // generation
  return map;
}

namespace {

Layer rms_norm(const LlamaConfig& c, const char* name) {
  return LayerNormalization(LayerNormalizationOptions()
                                .rms_scaling(true)
                                .gamma_offset(c.norm_gamma_offset)
                                .epsilon(c.rms_norm_eps)
                                .name(name));
}

}  // namespace

Llama::Llama(LlamaConfig c, int64_t seq_len, uint64_t seed)
    : Model({InputSpec{{seq_len}, DType::I32}}, c.model_type),
      config_(c),
      embed_tokens_(Embedding(c.vocab_size, c.hidden_size,
                              EmbeddingOptions()
                                  .embeddings_initializer(Initializer::normal(0.0, 0.02))
                                  .name("embed_tokens"))),
      norm_(rms_norm(c, "norm")) {
  c.validate();
  AS_CHECK(seq_len > 0 && seq_len <= c.max_position_embeddings, "sequence length ", seq_len,
           " must be between 1 and the model's max_position_embeddings (",
           c.max_position_embeddings, ")");
  set_seed(seed);
  const int64_t K = c.num_key_value_heads, G = c.group(), D = c.head_dim;
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const bool bias = c.attention_bias;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    blocks_.push_back(Block{
        rms_norm(c, "input_layernorm"),
        hf_projection("btc,kgdc->btkgd", {-1, K, G, D}, "q_proj", bias ? "kgd" : ""),
        hf_projection("btc,kdc->btkd", {-1, K, D}, "k_proj", bias ? "kd" : ""),
        hf_projection("btc,kdc->btkd", {-1, K, D}, "v_proj", bias ? "kd" : ""),
        hf_projection("btkgd,ckgd->btc", {-1, C}, "o_proj"),
        rms_norm(c, "post_attention_layernorm"), hf_projection("btc,ic->bti", {-1, I}, "gate_proj"),
        hf_projection("btc,ic->bti", {-1, I}, "up_proj"),
        hf_projection("bti,ci->btc", {-1, C}, "down_proj"),
        rms_norm(c, "pre_feedforward_layernorm"), rms_norm(c, "post_feedforward_layernorm")});
}

// Grouped-query self-attention: q [B, T, K, G, D], k and v [B, T, K, D].
Value Llama::attention(Trace& t, const Block& b, Value x, Value positions, int64_t window) const {
  Trace::Scope scope(t, "self_attn");
  const LlamaConfig& c = config_;
  const RotaryAttrs rope{.theta = c.rope_theta,
                         .factor = c.rope_factor,
                         .low_freq_factor = c.rope_low_freq_factor,
                         .high_freq_factor = c.rope_high_freq_factor,
                         .original_max_positions = c.rope_original_max_positions};
  const LoraOptions lora{c.lora_rank, c.lora_alpha};
  Value q = b.q_proj(t, x);
  if (lora.enabled()) q = q + lora_update(t, lora, x, q, "q_proj");
  q = ops::rotary(q, positions, rope);
  Value k = ops::rotary(b.k_proj(t, x), positions, rope);
  Value v = b.v_proj(t, x);
  if (lora.enabled()) v = v + lora_update(t, lora, x, v, "v_proj");
  // Mistral's and Gemma 2's sliding window: each query sees its last
  // `window` keys; Gemma 2's scores soft-capped.
  Value o = t.causal_attention(q, k, v, c.attention_scale(), window, c.attn_logit_softcapping);
  return b.o_proj(t, o);
}

// One decoder layer: pre-norm attention and MLP, each added to the residual;
// with post_norms (Gemma 2) their outputs are normalized before the add.
Value Llama::block(Trace& t, const Block& b, Value x, Value positions, int64_t layer) const {
  const bool post = config_.post_norms;
  Value a = attention(t, b, b.input_layernorm(t, x), positions, config_.window_of(layer));
  x = x + (post ? b.post_attention_layernorm(t, a) : a);
  Value h = (post ? b.pre_feedforward_layernorm : b.post_attention_layernorm)(t, x);
  Value m;
  {
    Trace::Scope mlp(t, "mlp");
    m = b.down_proj(t, activation(b.gate_proj(t, h)) * b.up_proj(t, h));
  }
  return x + (post ? b.post_feedforward_layernorm(t, m) : m);
}

// The MLP's gate: SwiGLU's silu or GeGLU's GELU.
Value Llama::activation(Value gate) const {
  if (config_.hidden_act == "silu") return ops::silu(gate);
  return ops::gelu(gate, /*tanh_approximation=*/config_.hidden_act == "gelu_pytorch_tanh");
}

Value Llama::call(Trace& t, const std::vector<Value>& inputs) {
  Value tokens = inputs.at(0);  // [B, T] i32
  const int64_t T = tokens.dim(1);
  const int64_t span = t.sequence_span(T);
  AS_CHECK(span <= config_.max_position_embeddings, "sequence length ", span,
           " exceeds max_position_embeddings ", config_.max_position_embeddings);
  Graph& g = t.graph();
  Value positions = t.positions(T);    // [T]
  Value x = embed_tokens_(t, tokens);  // [B, T, C]
  if (config_.scale_embeddings) x = ops::scale(x, std::sqrt(float(config_.hidden_size)));
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Trace::Scope scope(t, "layers." + std::to_string(i));
    g.open_region();  // a block: what recomputation recomputes, what the planner solves once
    x = block(t, blocks_[i], x, positions, int64_t(i));
    g.close_region();
  }
  x = norm_(t, x);
  Value head;  // [V, C]
  {
    const bool tied = config_.tie_word_embeddings;
    Trace::Scope s(t, tied ? "embed_tokens" : "lm_head");
    head = t.weight(tied ? "embeddings" : "kernel", {config_.vocab_size, config_.hidden_size},
                    Initializer::normal(0.0, 0.02));
  }
  Value logits = ops::einsum("btc,vc->btv", x, head);  // [B, T, V]
  if (config_.lora_rank > 0) freeze_all_but_adapters(t);
  const double cap = config_.final_logit_softcapping;
  return cap > 0 ? ops::soft_cap(logits, cap) : logits;
}

}  // namespace autoshard
