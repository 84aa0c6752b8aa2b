#include "autoshard/models/opt/opt.h"

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/layers.h"
#include "models/hf_layers.h"

namespace autoshard {

LayoutMap opt_megatron_layout(const OPTConfig& c, const std::string& m) {
  LayoutMap map;
  const std::optional<std::string> model = m, none;
  map["^embed_tokens\\.embeddings$"] = {model, none};
  if (!c.tie_word_embeddings) map["^lm_head\\.kernel$"] = {model, none};
  map["self_attn\\.(q|k|v)_proj\\.kernel$"] = {model, none, none};
  map["self_attn\\.(q|k|v)_proj\\.bias$"] = {model, none};
  map["self_attn\\.out_proj\\.kernel$"] = {none, model, none};
  map["fc1\\.kernel$"] = {model, none};
  map["fc1\\.bias$"] = {model};
  map["fc2\\.kernel$"] = {none, model};
  map["self_attn\\.(key|value)_cache$"] = {none, none, model, none};  // generation
  return map;
}

namespace {

Layer layer_norm(const char* name) {
  return LayerNormalization(LayerNormalizationOptions().epsilon(1e-5).name(name));
}

}  // namespace

OPT::OPT(OPTConfig c, int64_t seq_len, uint64_t seed)
    : Model({InputSpec{{seq_len}, DType::I32}}, "opt"),
      config_(c),
      embed_tokens_(Embedding(c.vocab_size, c.hidden_size,
                              EmbeddingOptions()
                                  .embeddings_initializer(Initializer::normal(0.0, 0.02))
                                  .name("embed_tokens"))),
      final_layer_norm_(layer_norm("final_layer_norm")) {
  c.validate();
  AS_CHECK(seq_len > 0 && seq_len <= c.max_position_embeddings, "sequence length ", seq_len,
           " must be between 1 and the model's max_position_embeddings (",
           c.max_position_embeddings, ")");
  set_seed(seed);
  const int64_t H = c.num_attention_heads, D = c.head_dim(), C = c.hidden_size, F = c.ffn_dim;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    blocks_.push_back(Block{layer_norm("self_attn_layer_norm"),
                            hf_projection("btc,hdc->bthd", {-1, H, D}, "q_proj", "hd"),
                            hf_projection("btc,hdc->bthd", {-1, H, D}, "k_proj", ""),
                            hf_projection("btc,hdc->bthd", {-1, H, D}, "v_proj", "hd"),
                            hf_projection("bthd,chd->btc", {-1, C}, "out_proj", "c"),
                            layer_norm("final_layer_norm"),
                            hf_projection("btc,fc->btf", {-1, F}, "fc1", "f"),
                            hf_projection("btf,cf->btc", {-1, C}, "fc2", "c")});
}

Value OPT::call(Trace& t, const std::vector<Value>& inputs) {
  const OPTConfig& c = config_;
  Value tokens = inputs.at(0);  // [B, T] i32
  const int64_t T = tokens.dim(1);
  AS_CHECK(t.sequence_span(T) <= c.max_position_embeddings, "sequence length ", t.sequence_span(T),
           " exceeds max_position_embeddings ", c.max_position_embeddings);
  Graph& g = t.graph();
  Value position_rows;  // [T, C]: rows p + 2 of the table
  {
    Trace::Scope s(t, "embed_positions");
    Value table =
        t.weight("embeddings", {c.max_position_embeddings + kPositionOffset, c.hidden_size},
                 Initializer::normal(0.0, 0.02));
    position_rows = ops::gather(table, t.positions(T), kPositionOffset);
  }
  Value x = embed_tokens_(t, tokens) + position_rows;  // [B, T, C]
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Trace::Scope scope(t, "layers." + std::to_string(i));
    g.open_region();  // a block: what recomputation recomputes, what the planner solves once
    const Block& b = blocks_[i];
    {
      Value h = b.self_attn_layer_norm(t, x);
      Trace::Scope attn(t, "self_attn");
      Value q = b.q_proj(t, h), v = b.v_proj(t, h);  // [B, T, H, D]
      if (c.lora.enabled()) {
        q = q + lora_update(t, c.lora, h, q, "q_proj");
        v = v + lora_update(t, c.lora, h, v, "v_proj");
      }
      Value k = with_softmax_ignored_bias(t, b.k_proj(t, h), "k_proj");
      Value o = t.causal_attention(q, k, v, 1.0 / std::sqrt(double(c.head_dim())));
      x = x + training_dropout(t, b.out_proj(t, o), c.dropout, "attn_drop");
    }
    Value h = b.fc2(t, ops::relu(b.fc1(t, b.final_layer_norm(t, x))));
    x = x + training_dropout(t, h, c.dropout, "mlp_drop");
    g.close_region();
  }
  x = final_layer_norm_(t, x);
  Value head;  // [V, C]
  {
    Trace::Scope s(t, c.tie_word_embeddings ? "embed_tokens" : "lm_head");
    head = t.weight(c.tie_word_embeddings ? "embeddings" : "kernel", {c.vocab_size, c.hidden_size},
                    Initializer::normal(0.0, 0.02));
  }
  if (c.lora.enabled()) freeze_all_but_adapters(t);
  return ops::einsum("btc,vc->btv", x, head);  // logits [B, T, V]
}

}  // namespace autoshard
