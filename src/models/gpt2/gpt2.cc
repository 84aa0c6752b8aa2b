#include "autoshard/models/gpt2/gpt2.h"

#include <climits>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "models/hf_layers.h"

namespace autoshard {

LayoutMap gpt2_megatron_layout(const std::string& m) {
  LayoutMap map;
  const std::optional<std::string> model = m, none;
  map["^wte\\.embeddings$"] = {model, none};
  map["attn\\.(query|key|value)\\.kernel$"] = {none, model, none};
  map["attn\\.(query|value)\\.bias$"] = {model, none};
  map["attn\\.attention_output\\.kernel$"] = {model, none, none};
  map["mlp\\.c_fc\\.kernel$"] = {none, model};
  map["mlp\\.c_fc\\.bias$"] = {model};
  map["mlp\\.c_proj\\.kernel$"] = {model, none};
  map["attn\\.(key|value)_cache$"] = {none, none, model, none};  // generation
  return map;
}

GPT2::GPT2(GPT2Config c, int64_t seq_len, uint64_t seed)
    : Model({InputSpec{{seq_len}, DType::I32}}, "gpt2"),
      config_(c),
      wte_(Embedding(
          c.vocab_size, c.n_embd,
          EmbeddingOptions().embeddings_initializer(Initializer::normal(0.0, 0.02)).name("wte"))),
      wpe_(Embedding(
          c.n_positions, c.n_embd,
          EmbeddingOptions().embeddings_initializer(Initializer::normal(0.0, 0.02)).name("wpe"))),
      ln_f_(LayerNormalization(
          LayerNormalizationOptions().epsilon(c.layer_norm_epsilon).name("ln_f"))) {
  c.validate();
  AS_CHECK(seq_len > 0 && seq_len <= c.n_positions, "sequence length ", seq_len,
           " must be between 1 and the model's n_positions (", c.n_positions, ")");
  set_seed(seed);
  const Initializer normal = Initializer::normal(0.0, 0.02);
  // GPT-2 scales the projections into the residual stream by 1/sqrt(2 L).
  const Initializer residual = Initializer::normal(0.0, 0.02 / std::sqrt(2.0 * c.n_layer));
  auto ln = [&](const char* name) {
    return LayerNormalization(LayerNormalizationOptions().epsilon(c.layer_norm_epsilon).name(name));
  };
  for (int64_t i = 0; i < c.n_layer; ++i) {
    const auto attention = MultiHeadAttentionOptions()
                               .use_causal_mask(true)
                               .key_bias(false)
                               .dropout(c.dropout)
                               .kernel_initializer(normal)
                               .output_kernel_initializer(residual)
                               .name("attn");
    blocks_.push_back(
        Block{ln("ln_1"),
              c.lora.enabled() ? LoraMultiHeadAttention(c.n_head, c.head_dim(), attention, c.lora)
                               : MultiHeadAttention(c.n_head, c.head_dim(), attention),
              ln("ln_2"),
              Dense(4 * c.n_embd,
                    DenseOptions().activation("gelu_tanh").kernel_initializer(normal).name("c_fc")),
              Dense(c.n_embd, DenseOptions().kernel_initializer(residual).name("c_proj"))});
  }
}

Value GPT2::call(Trace& t, const std::vector<Value>& inputs) {
  Value tokens = inputs.at(0);  // [B, T] i32
  const int64_t T = tokens.dim(1);
  AS_CHECK(t.sequence_span(T) <= config_.n_positions, "sequence length ", t.sequence_span(T),
           " exceeds n_positions ", config_.n_positions);
  Graph& g = t.graph();
  auto dropout = [&](Value x, const std::string& where) {
    return training_dropout(t, x, config_.dropout, where);
  };
  Value x = wte_(t, tokens) + wpe_(t, t.positions(T));  // [B, T, C]
  x = dropout(x, "drop");
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Trace::Scope scope(t, "h." + std::to_string(i));
    // Each block is a region: what recomputation recomputes, what the
    // planner solves once.
    g.open_region();
    const Block& b = blocks_[i];
    x = x + dropout(b.attn(t, b.ln_1(t, x)), "attn_drop");
    Value normed = b.ln_2(t, x);
    Value h;
    {
      Trace::Scope mlp(t, "mlp");
      h = b.c_proj(t, b.c_fc(t, normed));
    }
    x = x + dropout(h, "mlp_drop");
    g.close_region();
  }
  x = ln_f_(t, x);
  Value wte;
  {
    Trace::Scope s(t, "wte");
    wte = t.weight("embeddings", {config_.vocab_size, config_.n_embd},
                   Initializer::normal(0.0, 0.02));
  }
  if (config_.lora.enabled()) freeze_all_but_adapters(t);
  return ops::einsum("btc,vc->btv", x, wte);  // logits [B, T, V], tied to the embedding
}

}  // namespace autoshard
