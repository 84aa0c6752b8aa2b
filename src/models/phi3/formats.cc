// Phi-3's Hugging Face checkpoints (transformers' models/phi3/modeling_phi3.py):
// Llama's tensors with q, k and v fused into `self_attn.qkv_proj.weight`
// [(heads + 2 kv heads) x head_dim, hidden] (Phi3Attention slices its output
// as query, key, value) and the MLP's gate and up into
// `mlp.gate_up_proj.weight` [2 x intermediate, hidden] (Phi3MLP's chunk(2):
// gate first). Each autoshard weight is a run of its fused tensor's rows,
// so every device still reads only its own bytes.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/phi3/phi3.h"
#include "io/files.h"
#include "io/hf_tensors.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

std::vector<HfTensor> phi3_hf_tensors(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, V = c.vocab_size;
  const int64_t Q = c.num_attention_heads * c.head_dim, KV = c.num_key_value_heads * c.head_dim;
  std::vector<HfTensor> t = {{"embed_tokens.embeddings", {"model.embed_tokens.weight", {V, C}}},
                             {"norm.gamma", {"model.norm.weight", {C}}}};
  if (!c.tie_word_embeddings) t.push_back({"lm_head.kernel", {"lm_head.weight", {V, C}}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".", hf = "model." + ours;
    t.push_back({ours + "input_layernorm.gamma", {hf + "input_layernorm.weight", {C}}});
    t.push_back(
        {ours + "post_attention_layernorm.gamma", {hf + "post_attention_layernorm.weight", {C}}});
    const FileTensor qkv{hf + "self_attn.qkv_proj.weight", {Q + 2 * KV, C}};
    t.push_back({ours + "self_attn.q_proj.kernel", qkv, 0});
    t.push_back({ours + "self_attn.k_proj.kernel", qkv, Q * C});
    t.push_back({ours + "self_attn.v_proj.kernel", qkv, (Q + KV) * C});
    t.push_back({ours + "self_attn.o_proj.kernel", {hf + "self_attn.o_proj.weight", {C, Q}}});
    const FileTensor gate_up{hf + "mlp.gate_up_proj.weight", {2 * I, C}};
    t.push_back({ours + "mlp.gate_proj.kernel", gate_up, 0});
    t.push_back({ours + "mlp.up_proj.kernel", gate_up, I * C});
    t.push_back({ours + "mlp.down_proj.kernel", {hf + "mlp.down_proj.weight", {C, I}}});
  }
  return t;
}

void write_hf_phi3(Llama& model, const fs::path& dir, const HfSaveOptions& options) {
  const LlamaConfig& c = model.config();
  write_hf_reshaped(model, dir, phi3_hf_tensors(c), options);
  nlohmann::json cfg = {{"architectures", {"Phi3ForCausalLM"}},
                        {"model_type", "phi3"},
                        {"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden_size},
                        {"intermediate_size", c.intermediate_size},
                        {"num_hidden_layers", c.num_hidden_layers},
                        {"num_attention_heads", c.num_attention_heads},
                        {"num_key_value_heads", c.num_key_value_heads},
                        {"max_position_embeddings", c.max_position_embeddings},
                        {"original_max_position_embeddings", c.max_position_embeddings},
                        {"rms_norm_eps", c.rms_norm_eps},
                        {"rope_theta", c.rope_theta},
                        {"rope_scaling", nullptr},
                        {"hidden_act", "silu"},
                        {"resid_pdrop", 0.0},
                        {"embd_pdrop", 0.0},
                        {"attention_dropout", 0.0},
                        {"tie_word_embeddings", c.tie_word_embeddings},
                        {"torch_dtype", options.torch_dtype()}};
  cfg["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nullptr;
  write_text((dir / "config.json").string(), cfg.dump(2) + "\n");
}

}  // namespace

std::map<std::string, std::string> phi3_hf_names(const LlamaConfig& config) {
  return hf_names(phi3_hf_tensors(config));
}

void load_phi3_weights(Llama& model, const std::string& path) {
  load_hf_reshaped(model, path, phi3_hf_tensors(model.config()));
}

void save_hf_phi3(Llama& model, const std::string& dir, const HfSaveOptions& options) {
  write_directory_atomically(dir, [&](const fs::path& out) { write_hf_phi3(model, out, options); },
                             {.overwrite = options.overwrite, .read_names = hf_weight_files()});
}

}  // namespace autoshard
