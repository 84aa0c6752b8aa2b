#include "autoshard/nn/models/gpt2.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"

namespace autoshard {

GPT2Config GPT2Config::preset(const std::string& name) {
  auto make = [](int64_t l, int64_t h, int64_t c, int64_t v, int64_t p) {
    GPT2Config cfg;
    cfg.n_layer = l, cfg.n_head = h, cfg.n_embd = c, cfg.vocab_size = v, cfg.n_positions = p;
    return cfg;
  };
  if (name == "test") return make(2, 3, 24, 67, 16);
  if (name == "tiny") return make(2, 4, 64, 256, 64);
  if (name == "mini") return make(4, 4, 128, 256, 128);
  if (name == "gpt2") return make(12, 12, 768, 50257, 1024);
  if (name == "gpt2-medium") return make(24, 16, 1024, 50257, 1024);
  if (name == "gpt2-large") return make(36, 20, 1280, 50257, 1024);
  if (name == "gpt2-xl") return make(48, 25, 1600, 50257, 1024);
  fail(
      "unknown model preset '", name,
      "' (known: test, tiny, mini, gpt2, gpt2-medium, gpt2-large, gpt2-xl; or a config.json path)");
}

GPT2Config GPT2Config::from_json_file(const std::string& path) {
  std::ifstream in(path);
  AS_CHECK(in.good(), "cannot open model config '", path, "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    fail("model config '", path, "' is not valid JSON: ", e.what());
  }
  AS_CHECK(j.is_object(), "model config '", path, "' must be a JSON object");
  GPT2Config c;
  auto get = [&](const char* key, auto& field) {
    if (!j.contains(key)) fail("model config '", path, "' lacks \"", key, "\"");
    try {
      field = j.at(key).get<std::decay_t<decltype(field)>>();
    } catch (const std::exception&) {
      fail("model config '", path, "': \"", key, "\" must be a number");
    }
  };
  get("n_layer", c.n_layer);
  get("n_head", c.n_head);
  get("n_embd", c.n_embd);
  get("vocab_size", c.vocab_size);
  get("n_positions", c.n_positions);
  if (j.contains("resid_pdrop")) get("resid_pdrop", c.dropout);
  if (j.contains("layer_norm_epsilon")) get("layer_norm_epsilon", c.layer_norm_epsilon);
  c.validate();
  return c;
}

GPT2Config GPT2Config::from_name_or_file(const std::string& name_or_path) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json"))
    return from_json_file(name_or_path);
  return preset(name_or_path);
}

void GPT2Config::validate() const {
  AS_CHECK(n_layer > 0 && n_head > 0 && n_embd > 0 && vocab_size > 0 && n_positions > 0,
        "GPT-2 config: n_layer, n_head, n_embd, vocab_size and n_positions must be positive");
  AS_CHECK(n_embd % n_head == 0, "GPT-2 config: n_embd (", n_embd, ") must be a multiple of n_head (",
        n_head, ")");
  AS_CHECK(dropout >= 0 && dropout < 1, "GPT-2 config: dropout must be in [0, 1)");
}

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
    blocks_.push_back(
        Block{ln("ln_1"),
              MultiHeadAttention(c.n_head, c.head_dim(),
                                 MultiHeadAttentionOptions()
                                     .use_causal_mask(true)
                                     .key_bias(false)
                                     .dropout(c.dropout)
                                     .kernel_initializer(normal)
                                     .output_kernel_initializer(residual)
                                     .name("attn")),
              ln("ln_2"),
              Dense(4 * c.n_embd,
                    DenseOptions().activation("gelu_tanh").kernel_initializer(normal).name("c_fc")),
              Dense(c.n_embd, DenseOptions().kernel_initializer(residual).name("c_proj"))});
  }
}

Value GPT2::call(Trace& t, const std::vector<Value>& inputs) {
  Value tokens = inputs.at(0);  // [B, T] i32
  const int64_t T = tokens.dim(1);
  AS_CHECK(T <= config_.n_positions, "sequence length ", T, " exceeds n_positions ",
        config_.n_positions);
  Graph& g = t.graph();
  auto dropout = [&](Value x, const std::string& where) {
    if (!t.training() || config_.dropout == 0) return x;
    Trace::Scope s(t, where);
    return Dropout(config_.dropout, 0, "dropout")(t, x);
  };
  Value x = wte_(t, tokens) + wpe_(t, ops::iota(g, {T}));  // [B, T, C]
  x = dropout(x, "drop");
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Trace::Scope scope(t, "h." + std::to_string(i));
    const Block& b = blocks_[i];
    x = x + dropout(b.attn(t, b.ln_1(t, x)), "attn_drop");
    Value normed = b.ln_2(t, x);
    Value h;
    {
      Trace::Scope mlp(t, "mlp");
      h = b.c_proj(t, b.c_fc(t, normed));
    }
    x = x + dropout(h, "mlp_drop");
  }
  x = ln_f_(t, x);
  Value wte;
  {
    Trace::Scope s(t, "wte");
    wte = t.weight("embeddings", {config_.vocab_size, config_.n_embd}, Initializer::normal(0.0, 0.02));
  }
  return ops::einsum("btc,vc->btv", x, wte);  // logits [B, T, V], tied to the embedding
}

}  // namespace autoshard
