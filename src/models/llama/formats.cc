#include "autoshard/models/llama/formats.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "io/files.h"
#include "io/hf_tensors.h"
#include "models/llama/hf_tensors.h"

namespace autoshard {

namespace fs = std::filesystem;

std::vector<HfTensor> llama_hf_tensors(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Q = c.num_attention_heads * c.head_dim, KV = c.num_key_value_heads * c.head_dim;
  std::vector<HfTensor> t = {{"embed_tokens.embeddings", {"model.embed_tokens.weight", {V, C}}},
                             {"norm.gamma", {"model.norm.weight", {C}}}};
  if (!c.tie_word_embeddings) t.push_back({"lm_head.kernel", {"lm_head.weight", {V, C}}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".", hf = "model." + ours;
    auto add = [&](const std::string& path, const std::string& kind, Shape shape) {
      t.push_back({ours + path + "." + kind,
                   {hf + path + (kind == "bias" ? ".bias" : ".weight"), std::move(shape)}});
    };
    add("input_layernorm", "gamma", {C});
    add("post_attention_layernorm", "gamma", {C});
    if (c.post_norms) {  // gemma2
      add("pre_feedforward_layernorm", "gamma", {C});
      add("post_feedforward_layernorm", "gamma", {C});
    }
    add("self_attn.q_proj", "kernel", {Q, C});
    add("self_attn.k_proj", "kernel", {KV, C});
    add("self_attn.v_proj", "kernel", {KV, C});
    if (c.attention_bias) {
      add("self_attn.q_proj", "bias", {Q});
      add("self_attn.k_proj", "bias", {KV});
      add("self_attn.v_proj", "bias", {KV});
    }
    add("self_attn.o_proj", "kernel", {C, Q});
    add("mlp.gate_proj", "kernel", {I, C});
    add("mlp.up_proj", "kernel", {I, C});
    add("mlp.down_proj", "kernel", {C, I});
  }
  return t;
}

namespace {

void write_hf_llama(Llama& model, const fs::path& dir, const HfSaveOptions& options) {
  const LlamaConfig& c = model.config();
  write_hf_reshaped(model, dir, llama_hf_tensors(c), options);
  nlohmann::json cfg = {{"model_type", c.model_type},
                        {"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"head_dim", c.head_dim},
                        {"max_position_embeddings", c.max_position_embeddings},
                        {"rms_norm_eps", c.rms_norm_eps},
                        {"rope_theta", c.rope_theta},
                        {"attention_bias", c.attention_bias},
                        {"tie_word_embeddings", c.tie_word_embeddings},
                        {"torch_dtype", options.torch_dtype()}};
  const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2";
  cfg[gemma ? "hidden_activation" : "hidden_act"] = c.hidden_act;
  if (c.model_type == "gemma2") {  // null: none, as transformers writes it
    auto or_null = [](double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(); };
    cfg["query_pre_attn_scalar"] = or_null(c.query_pre_attn_scalar);
    cfg["attn_logit_softcapping"] = or_null(c.attn_logit_softcapping);
    cfg["final_logit_softcapping"] = or_null(c.final_logit_softcapping);
    cfg["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
    cfg["layer_types"] = c.layer_types;
  }
  if (c.rope_factor > 0)
    cfg["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", c.rope_factor},
        {"low_freq_factor", c.rope_low_freq_factor},
        {"high_freq_factor", c.rope_high_freq_factor},
        {"original_max_position_embeddings", int64_t(c.rope_original_max_positions)}};
  if (c.sliding_window > 0 && !cfg.contains("sliding_window"))
    cfg["sliding_window"] = c.sliding_window;
  write_text((dir / "config.json").string(), cfg.dump(2) + "\n");
}

}  // namespace

std::map<std::string, Shape> llama_hf_shapes(const LlamaConfig& config) {
  return hf_shapes(llama_hf_tensors(config));
}

std::map<std::string, std::string> llama_hf_names(const LlamaConfig& config) {
  return hf_names(llama_hf_tensors(config));
}

LlamaConfig llama_config_of(const std::string& dir) {
  return LlamaConfig::from_json_file(file_in_directory(dir, "config.json", "model config"));
}

void load_llama_weights(Llama& model, const std::string& path) {
  // Older checkpoints store each layer's rotary frequencies; they follow
  // from the config.
  load_hf_reshaped(model, path, llama_hf_tensors(model.config()),
                   [](const std::string& name) { return name.ends_with("rotary_emb.inv_freq"); });
}

void save_hf_llama(Llama& model, const std::string& dir, const HfSaveOptions& options) {
  write_directory_atomically(dir, [&](const fs::path& out) { write_hf_llama(model, out, options); },
                             {.overwrite = options.overwrite, .read_names = hf_weight_files()});
}

}  // namespace autoshard
