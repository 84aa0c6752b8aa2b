// Phi-3's Hugging Face checkpoints (transformers' models/phi3/modeling_phi3.py):
// Llama's tensors with q, k and v fused into `self_attn.qkv_proj.weight`
// [(heads + 2 kv heads) x head_dim, hidden] (Phi3Attention slices its output
// as query, key, value) and the MLP's gate and up into
// `mlp.gate_up_proj.weight` [2 x intermediate, hidden] (Phi3MLP's chunk(2):
// gate first). Each autoshard weight is a run of its fused tensor's rows,
// so every device still reads only its own bytes.
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/phi3/phi3.h"
#include "io/files.h"
#include "io/hf_tensors.h"
#include "models/llama/hf_tensors.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

// Llama's tensors with each layer's q, k, v and gate, up parts of one
// fused tensor, in that order (Llama's list has them one after another).
std::vector<HfTensor> phi3_hf_tensors(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size;
  const int64_t Q = c.num_attention_heads * c.head_dim, KV = c.num_key_value_heads * c.head_dim;
  struct Part {
    const char *name, *fused;
    int64_t rows, offset;
  };
  const Part parts[] = {
      {"self_attn.q_proj.weight", "self_attn.qkv_proj.weight", Q + 2 * KV, 0},
      {"self_attn.k_proj.weight", "self_attn.qkv_proj.weight", Q + 2 * KV, Q},
      {"self_attn.v_proj.weight", "self_attn.qkv_proj.weight", Q + 2 * KV, Q + KV},
      {"mlp.gate_proj.weight", "mlp.gate_up_proj.weight", 2 * I, 0},
      {"mlp.up_proj.weight", "mlp.gate_up_proj.weight", 2 * I, I}};
  std::vector<HfTensor> t = llama_hf_tensors(c);
  for (HfTensor& h : t)
    for (const Part& p : parts)
      if (h.file.name.ends_with(std::string(".") + p.name)) {
        const std::string layer = h.file.name.substr(0, h.file.name.size() - strlen(p.name));
        h.file = {layer + p.fused, {p.rows, C}};
        h.offset = p.offset * C;
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
