// LlamaConfig from Hugging Face config.json files, checked field by field.
#include <climits>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/nn/models/llama.h"
#include "nn/models/config_reader.h"

namespace autoshard {

LlamaConfig LlamaConfig::from_json_file(const std::string& path) {
  return from_reader(ConfigReader::from_file(path));
}

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& source) {
  return from_reader(ConfigReader(text, source));
}

namespace {

// rope_scaling: null, or Llama 3's {"rope_type" (or "type"): "llama3", factor,
// low_freq_factor, high_freq_factor, original_max_position_embeddings}.
void read_rope_scaling(const ConfigReader& r, LlamaConfig& c) {
  if (!r.has("rope_scaling")) return;
  const nlohmann::json& s = r.json()["rope_scaling"];
  AS_CHECK(s.is_object(), r.where("rope_scaling"), " must be an object or null");
  const std::string type = s.value("rope_type", s.value("type", std::string()));
  AS_CHECK(type == "llama3", r.where("rope_scaling"), " of type '", type,
           "' is not supported (only \"llama3\")");
  const ConfigReader inner(s.dump(), r.source() + "\" rope_scaling \"");
  c.rope_factor = 1;
  inner.real("factor", c.rope_factor, 0, 1e6, true);
  inner.real("low_freq_factor", c.rope_low_freq_factor, 0, 1e6, true);
  inner.real("high_freq_factor", c.rope_high_freq_factor, 0, 1e6, true);
  int64_t original = 8192;
  inner.size("original_max_position_embeddings", original, false);
  c.rope_original_max_positions = double(original);
  AS_CHECK(c.rope_high_freq_factor > c.rope_low_freq_factor, r.where("rope_scaling"),
           ": high_freq_factor must exceed low_freq_factor");
}

}  // namespace

LlamaConfig LlamaConfig::from_reader(const ConfigReader& r) {
  LlamaConfig c;
  c.model_type = r.model_type();
  const bool gemma = c.model_type == "gemma";
  AS_CHECK(c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2" || gemma,
           r.where("model_type"), " is '", c.model_type,
           "'; the Llama family is llama, mistral, qwen2 or gemma");
  r.size("vocab_size", c.vocab_size, true);
  r.size("hidden_size", c.hidden_size, true);
  r.size("intermediate_size", c.intermediate_size, true);
  r.size("num_hidden_layers", c.num_hidden_layers, true);
  r.size("num_attention_heads", c.num_attention_heads, true);
  c.num_key_value_heads = c.num_attention_heads;
  r.size("num_key_value_heads", c.num_key_value_heads, false);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  r.size("head_dim", c.head_dim, false);
  r.size("max_position_embeddings", c.max_position_embeddings, true);
  r.real("rms_norm_eps", c.rms_norm_eps, 0, 1, true);
  r.real("rope_theta", c.rope_theta, 1, 1e12, false);
  read_rope_scaling(r, c);
  c.attention_bias = c.model_type == "qwen2";
  r.flag("attention_bias", c.attention_bias);
  c.tie_word_embeddings = gemma;
  r.flag("tie_word_embeddings", c.tie_word_embeddings);
  bool use_window = c.model_type == "mistral";
  r.flag("use_sliding_window", use_window);
  if (use_window) r.size("sliding_window", c.sliding_window, false);
  // Fields whose other values would make another model than this code runs.
  const char* act_field = "hidden_act";
  if (gemma) {
    // Gemma's MLP reads hidden_activation (tanh GELU when unset; its
    // hidden_act "gelu" is ignored, as in transformers).
    c.norm_gamma_offset = 1;
    c.scale_embeddings = true;
    c.hidden_act = "gelu_pytorch_tanh";
    act_field = "hidden_activation";
  }
  r.text(act_field, c.hidden_act);
  if (c.hidden_act == "gelu_tanh") c.hidden_act = "gelu_pytorch_tanh";
  AS_CHECK(c.hidden_act == "silu" || c.hidden_act == "gelu_pytorch_tanh" || c.hidden_act == "gelu",
           r.where(act_field), " = '", c.hidden_act,
           "' is not supported (silu, gelu_pytorch_tanh or gelu)");
  bool mlp_bias = false;
  r.flag("mlp_bias", mlp_bias);
  AS_CHECK(!mlp_bias, r.where("mlp_bias"), " = true is not supported");
  c.validate();
  return c;
}

void LlamaConfig::validate() const {
  for (int64_t v : {vocab_size, hidden_size, intermediate_size, num_hidden_layers,
                    num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings})
    AS_CHECK(v > 0 && v <= INT32_MAX, "Llama config: sizes must be from 1 to 2147483647");
  AS_CHECK(num_attention_heads % num_key_value_heads == 0, "Llama config: num_attention_heads (",
           num_attention_heads, ") must be a multiple of num_key_value_heads (",
           num_key_value_heads, ")");
  AS_CHECK(head_dim % 2 == 0, "Llama config: head_dim (", head_dim,
           ") must be even (rotary embeddings turn pairs)");
  AS_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0,
           "Llama config: rms_norm_eps must be positive");
  AS_CHECK(sliding_window >= 0, "Llama config: sliding_window must be positive");
}

}  // namespace autoshard
