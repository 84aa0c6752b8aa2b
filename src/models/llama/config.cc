// LlamaConfig from Hugging Face config.json files, checked field by field.
#include <climits>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/llama/llama.h"

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
  const ConfigReader s = r.nested("rope_scaling");
  std::string type;
  s.text("type", type);  // older configs name it so
  s.text("rope_type", type);
  AS_CHECK(type == "llama3", r.where("rope_scaling"), " of type '", type,
           "' is not supported (only \"llama3\")");
  c.rope_factor = 1;
  s.real("factor", c.rope_factor, 0, 1e6, true);
  s.real("low_freq_factor", c.rope_low_freq_factor, 0, 1e6, true);
  s.real("high_freq_factor", c.rope_high_freq_factor, 0, 1e6, true);
  int64_t original = 8192;
  s.size("original_max_position_embeddings", original, false);
  c.rope_original_max_positions = double(original);
  AS_CHECK(c.rope_high_freq_factor > c.rope_low_freq_factor, r.where("rope_scaling"),
           ": high_freq_factor must exceed low_freq_factor");
}

// head_dim: the config's, else hidden_size / num_attention_heads rounded
// down (as transformers computes it), which must leave a head some width.
void read_head_dim(const ConfigReader& r, LlamaConfig& c) {
  if (r.has("head_dim")) return r.size("head_dim", c.head_dim, false);
  c.head_dim = c.hidden_size / c.num_attention_heads;
  AS_CHECK(c.head_dim >= 1, r.where("hidden_size"), " = ", c.hidden_size,
           " is less than \"num_attention_heads\" = ", c.num_attention_heads,
           ": without \"head_dim\" each head is hidden_size / num_attention_heads = 0 wide; give "
           "\"head_dim\" or a hidden_size of at least num_attention_heads");
}

// A Gemma 2 number that its config may give as null (none: 0) or leave out
// (transformers' default `absent`).
void read_optional(const ConfigReader& r, const char* key, double& field, double absent) {
  if (!r.json().contains(key)) {
    field = absent;
    return;
  }
  field = 0;
  r.real(key, field, 0, 1e9, true);
}

// layer_types: one "sliding_attention" or "full_attention" per layer;
// absent, Gemma 2's alternation (the even layers slide).
void read_layer_types(const ConfigReader& r, LlamaConfig& c) {
  if (!r.has("layer_types")) {
    for (int64_t i = 0; i < c.num_hidden_layers; ++i)
      c.layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    return;
  }
  const nlohmann::json& types = r.json().at("layer_types");
  AS_CHECK(types.is_array() && int64_t(types.size()) == c.num_hidden_layers, r.where("layer_types"),
           " must list num_hidden_layers = ", c.num_hidden_layers, " strings");
  for (const nlohmann::json& type : types) {
    AS_CHECK(type == "sliding_attention" || type == "full_attention", r.where("layer_types"),
             " holds ", type.dump(), "; each layer is \"sliding_attention\" or \"full_attention\"");
    c.layer_types.push_back(type.get<std::string>());
  }
}

// Gemma 2's fields beyond Gemma's, with transformers' defaults where absent.
void read_gemma2(const ConfigReader& r, LlamaConfig& c) {
  c.post_norms = true;
  read_optional(r, "query_pre_attn_scalar", c.query_pre_attn_scalar, 256);
  read_optional(r, "attn_logit_softcapping", c.attn_logit_softcapping, 50);
  read_optional(r, "final_logit_softcapping", c.final_logit_softcapping, 30);
  double window = 0;
  read_optional(r, "sliding_window", window, 4096);
  AS_CHECK(window == std::floor(window) && window <= INT32_MAX, r.where("sliding_window"),
           " must be a whole number of keys");
  c.sliding_window = int64_t(window);
  read_layer_types(r, c);
  AS_CHECK(!c.attention_bias, r.where("attention_bias"),
           " = true is not supported for gemma2 (its q, k, v and o projections have no biases)");
}

}  // namespace

LlamaConfig LlamaConfig::from_reader(const ConfigReader& r) {
  LlamaConfig c;
  c.model_type = r.model_type();
  const bool gemma2 = c.model_type == "gemma2";
  const bool gemma = c.model_type == "gemma" || gemma2;
  AS_CHECK(c.model_type == "llama" || c.model_type == "mistral" || c.model_type == "qwen2" || gemma,
           r.where("model_type"), " is '", c.model_type,
           "'; the Llama family is llama, mistral, qwen2, gemma or gemma2");
  r.size("vocab_size", c.vocab_size, true);
  r.size("hidden_size", c.hidden_size, true);
  r.size("intermediate_size", c.intermediate_size, true);
  r.size("num_hidden_layers", c.num_hidden_layers, true);
  r.size("num_attention_heads", c.num_attention_heads, true);
  c.num_key_value_heads = c.num_attention_heads;
  r.size("num_key_value_heads", c.num_key_value_heads, false);
  read_head_dim(r, c);
  AS_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, r.where("num_attention_heads"),
           " = ", c.num_attention_heads,
           " must be a multiple of \"num_key_value_heads\" = ", c.num_key_value_heads,
           " (each kv head serves a group of query heads)");
  AS_CHECK(c.head_dim % 2 == 0, r.where("head_dim"), " = ", c.head_dim,
           " must be even (rotary embeddings turn pairs)",
           r.has("head_dim") ? "" : "; it is hidden_size / num_attention_heads when not given");
  r.size("max_position_embeddings", c.max_position_embeddings, true);
  r.real("rms_norm_eps", c.rms_norm_eps, 0, 1, true);
  r.real("rope_theta", c.rope_theta, 1, 1e12, false);
  read_rope_scaling(r, c);
  // Qwen2's attention always has q, k and v biases: transformers' Qwen2
  // ignores attention_bias, which its configs may carry with any value.
  c.attention_bias = c.model_type == "qwen2";
  bool attention_bias = c.attention_bias;
  r.flag("attention_bias", attention_bias);
  if (c.model_type != "qwen2") c.attention_bias = attention_bias;
  c.tie_word_embeddings = gemma;
  r.flag("tie_word_embeddings", c.tie_word_embeddings);
  bool use_window = c.model_type == "mistral";
  if (!gemma2) r.flag("use_sliding_window", use_window);
  if (use_window) r.size("sliding_window", c.sliding_window, false);
  if (gemma2) read_gemma2(r, c);
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
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"max_position_embeddings", max_position_embeddings}};
  for (const auto& [name, v] : sizes)
    AS_CHECK(v > 0 && v <= INT32_MAX, "Llama config: ", name, " = ", v,
             " must be from 1 to 2147483647");
  AS_CHECK(num_attention_heads % num_key_value_heads == 0, "Llama config: num_attention_heads (",
           num_attention_heads, ") must be a multiple of num_key_value_heads (",
           num_key_value_heads, ")");
  AS_CHECK(head_dim % 2 == 0, "Llama config: head_dim (", head_dim,
           ") must be even (rotary embeddings turn pairs)");
  AS_CHECK(std::isfinite(rms_norm_eps) && rms_norm_eps > 0,
           "Llama config: rms_norm_eps must be positive");
  AS_CHECK(sliding_window >= 0, "Llama config: sliding_window must be positive");
  AS_CHECK(layer_types.empty() || int64_t(layer_types.size()) == num_hidden_layers,
           "Llama config: layer_types must name each of the ", num_hidden_layers, " layers");
  const std::pair<const char*, double> reals[] = {
      {"query_pre_attn_scalar", query_pre_attn_scalar},
      {"attn_logit_softcapping", attn_logit_softcapping},
      {"final_logit_softcapping", final_logit_softcapping}};
  for (const auto& [name, v] : reals)
    AS_CHECK(std::isfinite(v) && v >= 0, "Llama config: ", name, " = ", v,
             " must be positive (0: unset)");
}

int64_t LlamaConfig::window_of(int64_t layer) const {
  if (layer_types.empty()) return sliding_window;
  return layer_types.at(size_t(layer)) == "sliding_attention" ? sliding_window : 0;
}

double LlamaConfig::attention_scale() const {
  return 1.0 / std::sqrt(query_pre_attn_scalar > 0 ? query_pre_attn_scalar : double(head_dim));
}

}  // namespace autoshard
