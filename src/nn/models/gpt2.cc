#include "autoshard/nn/models/gpt2.h"

#include <cmath>
#include <climits>
#include <fstream>
#include <sstream>
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
  std::stringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), path);
}

GPT2Config GPT2Config::from_json_text(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail("model config '", source, "' is not valid JSON: ", e.what());
  }
  AS_CHECK(j.is_object(), "model config '", source, "' must be a JSON object");
  auto where = [&](const char* key) { return cat("model config '", source, "': \"", key, "\""); };
  if (j.contains("model_type")) {
    AS_CHECK(j["model_type"].is_string(), where("model_type"), " must be a string");
    const std::string type = j["model_type"].get<std::string>();
    AS_CHECK(type == "gpt2", where("model_type"), " is '", type,
             "'; this build knows GPT-2 only (model_type \"gpt2\")");
  }
  GPT2Config c;
  // Sizes are whole numbers from 1 to 2^31 - 1 (token ids and BLAS sizes are ints).
  auto size = [&](const char* key, int64_t& field, bool required) {
    if (!j.contains(key)) {
      AS_CHECK(!required, "model config '", source, "' lacks \"", key, "\"");
      return;
    }
    const auto& v = j[key];
    AS_CHECK(v.is_number_integer(), where(key), " must be a whole number, got ", v.dump());
    AS_CHECK(v.is_number_unsigned() && v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= INT32_MAX,
             where(key), " = ", v.dump(), " is out of range (1 to 2147483647)");
    field = v.get<int64_t>();
  };
  auto real = [&](const char* key, double& field, double lo, double hi, bool lo_open) {
    if (!j.contains(key) || j[key].is_null()) return;
    const auto& v = j[key];
    AS_CHECK(v.is_number(), where(key), " must be a number, got ", v.dump());
    field = v.get<double>();
    AS_CHECK(std::isfinite(field) && (lo_open ? field > lo : field >= lo) && field < hi, where(key),
             " = ", v.dump(), " is out of range (", lo_open ? "above " : "", lo, " to below ", hi,
             ")");
  };
  size("n_layer", c.n_layer, true);
  size("n_head", c.n_head, true);
  size("n_embd", c.n_embd, true);
  size("vocab_size", c.vocab_size, true);
  if (j.contains("n_positions"))
    size("n_positions", c.n_positions, true);
  else
    size("n_ctx", c.n_positions, true);  // older configs name it so
  real("resid_pdrop", c.dropout, 0, 1, false);
  real("layer_norm_epsilon", c.layer_norm_epsilon, 0, 1, true);
  // Fields whose other values would make another model than this code runs.
  if (j.contains("activation_function")) {
    const auto& a = j["activation_function"];
    AS_CHECK(a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast", where("activation_function"),
             " = ", a.dump(), " is not supported (GPT-2's tanh GELU: gelu_new)");
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null())
    AS_CHECK(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4 * c.n_embd,
             where("n_inner"), " = ", j["n_inner"].dump(), " is not supported (only 4 * n_embd)");
  for (const char* flag : {"add_cross_attention", "scale_attn_by_inverse_layer_idx",
                           "reorder_and_upcast_attn"})
    if (j.contains(flag)) AS_CHECK(j[flag] == false, where(flag), " = true is not supported");
  if (j.contains("scale_attn_weights"))
    AS_CHECK(j["scale_attn_weights"] == true, where("scale_attn_weights"),
             " = false is not supported");
  c.validate();
  return c;
}

GPT2Config GPT2Config::from_name_or_file(const std::string& name_or_path) {
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json"))
    return from_json_file(name_or_path);
  return preset(name_or_path);
}

void GPT2Config::validate() const {
  for (int64_t v : {n_layer, n_head, n_embd, vocab_size, n_positions})
    AS_CHECK(v > 0 && v <= INT32_MAX,
             "GPT-2 config: n_layer, n_head, n_embd, vocab_size and n_positions must be from 1 to ",
             "2147483647");
  AS_CHECK(n_embd % n_head == 0, "GPT-2 config: n_embd (", n_embd, ") must be a multiple of n_head (",
        n_head, ")");
  AS_CHECK(dropout >= 0 && dropout < 1, "GPT-2 config: dropout must be in [0, 1)");
  AS_CHECK(std::isfinite(layer_norm_epsilon) && layer_norm_epsilon > 0,
           "GPT-2 config: layer_norm_epsilon must be positive");
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
