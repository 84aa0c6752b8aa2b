// The Llama family's KerasHub backbones (LlamaBackbone, Llama3Backbone,
// MistralBackbone, QwenBackbone, GemmaBackbone): the variables and the config
// both ways. Followed: keras-hub's models/<family> and
// utils/transformers/convert_<family>.py.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/keras_hub_fields.h"
#include "autoshard/models/llama/formats.h"
#include "models/keras_hub_table.h"

namespace autoshard::keras_hub {

using nlohmann::json;

namespace {

// The Llama-style decoders (LlamaBackbone, MistralBackbone, QwenBackbone):
// classes differ, attributes and names agree.
struct LlamaStyle {
  const char *backbone, *task, *decoder, *norm;
};

LlamaStyle llama_style(const std::string& model_type) {
  if (model_type == "llama")
    return {"LlamaBackbone", "LlamaCausalLM", "llama_transformer_decoder", "llama_layer_norm"};
  if (model_type == "mistral")
    return {"MistralBackbone", "MistralCausalLM", "mistral_transformer_decoder",
            "mistral_layer_normalization"};
  if (model_type == "qwen2")
    return {"QwenBackbone", "QwenCausalLM", "qwen_transformer_decoder", "qwen_layer_norm"};
  fail("KerasHub presets: no backbone for model_type '", model_type, "'");
}

}  // namespace

Variables llama_variables(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, K = c.num_key_value_heads, G = c.group(), D = c.head_dim;
  const int64_t H = c.num_attention_heads, I = c.intermediate_size, V = c.vocab_size;
  const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2";
  Table t;
  const LlamaStyle style = gemma ? LlamaStyle{"GemmaBackbone", "GemmaCausalLM",
                                              "gemma_decoder_block", "rms_normalization"}
                                 : llama_style(c.model_type);
  t.out.class_name = style.backbone;
  t.out.task_class_name = style.task;
  t.same("embed_tokens.embeddings", "token_embedding/embeddings",
         "layers/reversible_embedding/vars/0", {V, C});
  if (!c.tie_word_embeddings)
    t.transposed("lm_head.kernel", "token_embedding/reverse_embeddings",
                 "layers/reversible_embedding/vars/1", C, V);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("layers.", i, "."), a = ours + "self_attn.";
    const std::string path = cat(gemma ? "decoder_block_" : "transformer_layer_", i, "/");
    const std::string g = cat("layers/", numbered(style.decoder, i), "/");
    auto norm = [&](const std::string& weight, const std::string& keras, const std::string& attr) {
      t.same(ours + weight + ".gamma", path + keras + "/scale", g + attr + "/vars/0", {C});
    };
    if (gemma) {
      // Gemma's EinsumDense kernels: query (heads, hidden, head_dim), output
      // (heads, head_dim, hidden).
      norm("input_layernorm", "pre_attention_norm", "pre_attention_norm");
      if (c.post_norms) {
        norm("post_attention_layernorm", "post_attention_norm", "post_attention_norm");
        norm("pre_feedforward_layernorm", "pre_ffw_norm", "pre_ffw_norm");
        norm("post_feedforward_layernorm", "post_ffw_norm", "post_ffw_norm");
      } else {
        norm("post_attention_layernorm", "pre_ffw_norm", "pre_ffw_norm");
      }
      const std::string p = path + "attention/", h = g + "attention/";
      t.add(a + "q_proj.kernel", p + "query/kernel", h + "query_dense/vars/0", {H, C, D},
            {K, G, C, D}, {0, 1, 3, 2});
      t.add(a + "k_proj.kernel", p + "key/kernel", h + "key_dense/vars/0", {K, C, D}, {K, C, D},
            {0, 2, 1});
      t.add(a + "v_proj.kernel", p + "value/kernel", h + "value_dense/vars/0", {K, C, D}, {K, C, D},
            {0, 2, 1});
      t.add(a + "o_proj.kernel", p + "attention_output/kernel", h + "output_dense/vars/0",
            {H, D, C}, {K, G, D, C}, {3, 0, 1, 2});
      t.transposed(ours + "mlp.gate_proj.kernel", path + "ffw_gating/kernel",
                   g + "gating_ffw/vars/0", C, I);
      t.transposed(ours + "mlp.up_proj.kernel", path + "ffw_gating_2/kernel",
                   g + "gating_ffw_2/vars/0", C, I);
      t.transposed(ours + "mlp.down_proj.kernel", path + "ffw_linear/kernel",
                   g + "ffw_linear/vars/0", I, C);
      continue;
    }
    norm("input_layernorm", "self_attention_layernorm", "_self_attention_layernorm");
    norm("post_attention_layernorm", "feedforward_layernorm", "_feedforward_layernorm");
    // Query (hidden, heads, head_dim), key and value (hidden, kv heads,
    // head_dim), output (heads, head_dim, hidden); Qwen's biases (heads,
    // head_dim).
    const std::string p = path + "self_attention/", h = g + "_self_attention_layer/";
    t.add(a + "q_proj.kernel", p + "query/kernel", h + "_query_dense/vars/0", {C, H, D},
          {C, K, G, D}, {1, 2, 3, 0});
    if (c.attention_bias)
      t.add(a + "q_proj.bias", p + "query/bias", h + "_query_dense/vars/1", {H, D}, {K, G, D},
            {0, 1, 2});
    for (const char* kv : {"key", "value"}) {
      const std::string w = a + (std::string(kv) == "key" ? "k_proj" : "v_proj");
      const std::string d = cat(h, "_", kv, "_dense/vars/");
      t.add(w + ".kernel", cat(p, kv, "/kernel"), d + "0", {C, K, D}, {C, K, D}, {1, 2, 0});
      if (c.attention_bias) t.same(w + ".bias", cat(p, kv, "/bias"), d + "1", {K, D});
    }
    t.add(a + "o_proj.kernel", p + "attention_output/kernel", h + "_output_dense/vars/0", {H, D, C},
          {K, G, D, C}, {3, 0, 1, 2});
    t.transposed(ours + "mlp.gate_proj.kernel", path + "feedforward_gate_dense/kernel",
                 g + "_feedforward_gate_dense/vars/0", C, I);
    t.transposed(ours + "mlp.up_proj.kernel", path + "feedforward_intermediate_dense/kernel",
                 g + "_feedforward_intermediate_dense/vars/0", C, I);
    t.transposed(ours + "mlp.down_proj.kernel", path + "feedforward_output_dense/kernel",
                 g + "_feedforward_output_dense/vars/0", I, C);
  }
  if (gemma)
    t.same("norm.gamma", "final_normalization/scale", "layers/rms_normalization/vars/0", {C});
  else
    t.same("norm.gamma", "sequence_output_layernorm/scale", cat("layers/", style.norm, "/vars/0"),
           {C});
  return t.out;
}

namespace {

// The rotary and size fields Llama, Mistral and Qwen share.
json decoder_hf(Fields& f, const char* model_type) {
  const int64_t C = f.size("hidden_dim"), H = f.size("num_query_heads");
  for (const char* k : {"rope_position_scaling_factor", "rope_scaling_factor"})
    f.only(k, 1.0, "autoshard's rotary embeddings have no linear position scaling");
  f.only("dropout", 0.0, "autoshard's Llama family has no dropout");
  return {{"model_type", model_type},
          {"vocab_size", f.size("vocabulary_size")},
          {"num_hidden_layers", f.size("num_layers")},
          {"num_attention_heads", H},
          {"num_key_value_heads", f.size("num_key_value_heads")},
          {"hidden_size", C},
          {"head_dim", C / H},
          {"intermediate_size", f.size("intermediate_dim")},
          {"rope_theta", f.real("rope_max_wavelength", 10000)},
          {"rms_norm_eps", f.real("layer_norm_epsilon", 1e-6)},
          {"max_position_embeddings", kRotaryPositions},
          {"hidden_act", "silu"}};
}

json llama_hf(Fields& f) {
  json hf = decoder_hf(f, "llama");
  hf["rms_norm_eps"] = f.real("layer_norm_epsilon", 1e-6);
  hf["tie_word_embeddings"] = f.flag("tie_word_embeddings", false);
  // Llama 3.1's frequency adjustment is Hugging Face's llama3 rope_scaling.
  if (const auto factor = f.maybe_real("rope_frequency_adjustment_factor")) {
    hf["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", *factor},
        {"low_freq_factor", f.real("rope_low_freq_factor", 1)},
        {"high_freq_factor", f.real("rope_high_freq_factor", 4)},
        {"original_max_position_embeddings", f.size("rope_pretraining_sequence_length", 8192)}};
  } else {
    for (const char* k :
         {"rope_low_freq_factor", "rope_high_freq_factor", "rope_pretraining_sequence_length"})
      if (f.has(k)) f.bad(k, "needs rope_frequency_adjustment_factor (Llama 3.1's rope scaling)");
  }
  return hf;
}

json mistral_hf(Fields& f) {
  json hf = decoder_hf(f, "mistral");
  hf["sliding_window"] = f.size("sliding_window", 512);
  hf["tie_word_embeddings"] = false;
  return hf;
}

json qwen_hf(Fields& f) {
  json hf = decoder_hf(f, "qwen2");
  hf["tie_word_embeddings"] = f.flag("tie_word_embeddings", true);
  hf["attention_bias"] = true;
  hf["use_sliding_window"] = f.flag("use_sliding_window_attention", false);
  hf["sliding_window"] = f.size("sliding_window_size", 32768);
  return hf;
}

json gemma_hf(Fields& f) {
  const int64_t C = f.size("hidden_dim"), H = f.size("num_query_heads"), D = f.size("head_dim");
  const int64_t I2 = f.size("intermediate_dim");
  if (I2 % 2 != 0) f.bad("intermediate_dim", "must be even (twice the gate's width)");
  f.only("dropout", 0.0, "autoshard's Gemma has no dropout");
  json hf = {{"vocab_size", f.size("vocabulary_size")},
             {"num_hidden_layers", f.size("num_layers")},
             {"num_attention_heads", H},
             {"num_key_value_heads", f.size("num_key_value_heads")},
             {"hidden_size", C},
             {"head_dim", D},
             {"intermediate_size", I2 / 2},
             {"rms_norm_eps", f.real("layer_norm_epsilon", 1e-6)},
             {"rope_theta", 10000.0},
             {"max_position_embeddings", kRotaryPositions},
             {"hidden_activation", "gelu_pytorch_tanh"},
             {"tie_word_embeddings", true}};
  const bool post_ffw = f.flag("use_post_ffw_norm", false);
  const bool post_attn = f.flag("use_post_attention_norm", false);
  const auto final_cap = f.maybe_real("final_logit_soft_cap");
  const auto attn_cap = f.maybe_real("attention_logit_soft_cap");
  const bool sliding = f.flag("use_sliding_window_attention", false);
  const int64_t window = f.size("sliding_window_size", 4096);
  const bool normalize = f.flag("query_head_dim_normalize", true);
  if (!post_ffw && !post_attn && !final_cap && !attn_cap && !sliding && normalize) {
    hf["model_type"] = "gemma";
    return hf;
  }
  // Gemma 2: both post norms, soft caps, sliding window on the even layers.
  if (post_ffw != post_attn)
    f.bad(post_ffw ? "use_post_attention_norm" : "use_post_ffw_norm",
          "must equal the other post norm flag (autoshard's Gemma 2 has both or neither)");
  AS_CHECK(post_ffw, f.where(),
           ": Gemma 2's fields (soft caps, sliding window, query_head_dim_normalize false) need "
           "use_post_ffw_norm and use_post_attention_norm true");
  hf["model_type"] = "gemma2";
  hf["query_pre_attn_scalar"] = normalize ? D : C / H;
  hf["attn_logit_softcapping"] = attn_cap ? json(*attn_cap) : json(nullptr);
  hf["final_logit_softcapping"] = final_cap ? json(*final_cap) : json(nullptr);
  hf["sliding_window"] = window;
  if (!sliding)
    hf["layer_types"] =
        std::vector<std::string>(hf["num_hidden_layers"].get<size_t>(), "full_attention");
  return hf;
}

// GemmaBackbone's Gemma 2 fields: both post norms, the soft caps, the query
// scale (head_dim, or hidden / heads) and the sliding window on the even
// layers (KerasHub's alternation) or on none.
void gemma2_fields(const LlamaConfig& c, json& j) {
  AS_CHECK(c.post_norms, "KerasHub preset: a gemma2 model without its post norms");
  const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : c.head_dim;
  AS_CHECK(scalar == double(c.head_dim) || scalar == double(c.hidden_size / c.num_attention_heads),
           "KerasHub preset: GemmaBackbone scales queries by head_dim or hidden / heads "
           "(query_head_dim_normalize); query_pre_attn_scalar is ",
           scalar);
  // Which layers slide: none, or exactly the even ones.
  std::vector<bool> slides(size_t(c.num_hidden_layers));
  bool sliding = false, alternating = true;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    slides[size_t(i)] = c.sliding_window > 0 &&
                        (c.layer_types.empty() || c.layer_types[size_t(i)] == "sliding_attention");
    sliding = sliding || slides[size_t(i)];
    alternating = alternating && slides[size_t(i)] == (i % 2 == 0);
  }
  AS_CHECK(!sliding || alternating,
           "KerasHub preset: GemmaBackbone slides its window on the even layers (or none)");
  j.update({{"query_head_dim_normalize", scalar == double(c.head_dim)},
            {"use_post_ffw_norm", true},
            {"use_post_attention_norm", true},
            {"final_logit_soft_cap",
             c.final_logit_softcapping > 0 ? json(c.final_logit_softcapping) : json(nullptr)},
            {"attention_logit_soft_cap",
             c.attn_logit_softcapping > 0 ? json(c.attn_logit_softcapping) : json(nullptr)},
            {"use_sliding_window_attention", sliding},
            {"sliding_window_size", c.sliding_window > 0 ? c.sliding_window : 4096}});
}

}  // namespace

json llama_hf_fields(const std::string& backbone, Fields& f) {
  if (backbone == "LlamaBackbone" || backbone == "Llama3Backbone") return llama_hf(f);
  if (backbone == "MistralBackbone") return mistral_hf(f);
  if (backbone == "QwenBackbone") return qwen_hf(f);
  return gemma_hf(f);
}

json llama_backbone_config(const LlamaConfig& c) {
  const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2";
  json j = {{"vocabulary_size", c.vocab_size},
            {"num_layers", c.num_hidden_layers},
            {"num_query_heads", c.num_attention_heads},
            {"num_key_value_heads", c.num_key_value_heads},
            {"hidden_dim", c.hidden_size},
            {"layer_norm_epsilon", c.rms_norm_eps},
            {"dropout", 0.0}};
  if (gemma) {
    j.update({{"intermediate_dim", 2 * c.intermediate_size}, {"head_dim", c.head_dim}});
    if (c.model_type == "gemma2") gemma2_fields(c, j);
    return j;
  }
  AS_CHECK(c.head_dim * c.num_attention_heads == c.hidden_size, "KerasHub preset: KerasHub's ",
           c.model_type, " backbone has head_dim = hidden / heads; this model's head_dim is ",
           c.head_dim);
  j["intermediate_dim"] = c.intermediate_size;
  j["rope_max_wavelength"] = c.rope_theta;
  if (c.model_type == "llama") {
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    if (c.rope_factor > 0)
      j.update({{"rope_frequency_adjustment_factor", c.rope_factor},
                {"rope_low_freq_factor", c.rope_low_freq_factor},
                {"rope_high_freq_factor", c.rope_high_freq_factor},
                {"rope_pretraining_sequence_length", int64_t(c.rope_original_max_positions)}});
  } else if (c.model_type == "mistral") {
    AS_CHECK(!c.tie_word_embeddings, "KerasHub preset: MistralBackbone is untied");
    j["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : 4096;
  } else {  // qwen2
    j["tie_word_embeddings"] = c.tie_word_embeddings;
    j["use_sliding_window_attention"] = c.sliding_window > 0;
    j["sliding_window_size"] = c.sliding_window > 0 ? c.sliding_window : 32768;
  }
  return j;
}

}  // namespace autoshard::keras_hub
