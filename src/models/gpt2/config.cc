// GPT2Config: presets and Hugging Face config.json files, checked field by
// field (kept apart from the model so a fuzzer can reach the parser alone).
#include <climits>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/gpt2/gpt2.h"

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
  if (name == "gpt3-175b") return make(96, 96, 12288, 51200, 2048);
  fail("unknown model preset '", name,
       "' (known: test, tiny, mini, gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt3-175b; or a "
       "config.json path)");
}

GPT2Config GPT2Config::from_json_file(const std::string& path) {
  return from_reader(ConfigReader::from_file(path));
}

GPT2Config GPT2Config::from_json_text(const std::string& text, const std::string& source) {
  return from_reader(ConfigReader(text, source));
}

GPT2Config GPT2Config::from_reader(const ConfigReader& r) {
  const nlohmann::json& j = r.json();
  const std::string type = r.model_type();
  AS_CHECK(type.empty() || type == "gpt2", r.where("model_type"), " is '", type, "', not \"gpt2\"");
  GPT2Config c;
  r.size("n_layer", c.n_layer, true);
  r.size("n_head", c.n_head, true);
  r.size("n_embd", c.n_embd, true);
  r.size("vocab_size", c.vocab_size, true);
  if (j.contains("n_positions"))
    r.size("n_positions", c.n_positions, true);
  else
    r.size("n_ctx", c.n_positions, true);  // older configs name it so
  r.real("resid_pdrop", c.dropout, 0, 1, false);
  r.real("layer_norm_epsilon", c.layer_norm_epsilon, 0, 1, true);
  // Fields whose other values would make another model than this code runs.
  if (j.contains("activation_function")) {
    const auto& a = j["activation_function"];
    AS_CHECK(a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast",
             r.where("activation_function"), " = ", a.dump(),
             " is not supported (GPT-2's tanh GELU: gelu_new)");
  }
  if (j.contains("n_inner") && !j["n_inner"].is_null())
    AS_CHECK(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4 * c.n_embd,
             r.where("n_inner"), " = ", j["n_inner"].dump(), " is not supported (only 4 * n_embd)");
  for (const char* flag :
       {"add_cross_attention", "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn"})
    if (j.contains(flag)) AS_CHECK(j[flag] == false, r.where(flag), " = true is not supported");
  if (j.contains("scale_attn_weights"))
    AS_CHECK(j["scale_attn_weights"] == true, r.where("scale_attn_weights"),
             " = false is not supported");
  c.validate();
  return c;
}

void GPT2Config::validate() const {
  for (int64_t v : {n_layer, n_head, n_embd, vocab_size, n_positions})
    AS_CHECK(v > 0 && v <= INT32_MAX,
             "GPT-2 config: n_layer, n_head, n_embd, vocab_size and n_positions must be from 1 to ",
             "2147483647");
  AS_CHECK(n_embd % n_head == 0, "GPT-2 config: n_embd (", n_embd,
           ") must be a multiple of n_head (", n_head, ")");
  AS_CHECK(dropout >= 0 && dropout < 1, "GPT-2 config: dropout must be in [0, 1)");
  AS_CHECK(std::isfinite(layer_norm_epsilon) && layer_norm_epsilon > 0,
           "GPT-2 config: layer_norm_epsilon must be positive");
}

}  // namespace autoshard
