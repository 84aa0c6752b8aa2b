#include "autoshard/models/opt/formats.h"

#include <nlohmann/json.hpp>

#include "io/files.h"
#include "io/hf_tensors.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

std::vector<HfTensor> hf_tensors(const OPTConfig& c) {
  const int64_t C = c.hidden_size, F = c.ffn_dim, V = c.vocab_size;
  const int64_t P = c.max_position_embeddings + OPT::kPositionOffset;
  std::vector<HfTensor> t = {
      {"embed_tokens.embeddings", {"model.decoder.embed_tokens.weight", {V, C}}},
      {"embed_positions.embeddings", {"model.decoder.embed_positions.weight", {P, C}}},
      {"final_layer_norm.gamma", {"model.decoder.final_layer_norm.weight", {C}}},
      {"final_layer_norm.beta", {"model.decoder.final_layer_norm.bias", {C}}}};
  if (!c.tie_word_embeddings) t.push_back({"lm_head.kernel", {"lm_head.weight", {V, C}}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = "layers." + std::to_string(i) + ".", hf = "model.decoder." + ours;
    // Every module has a weight and a bias: LayerNorm's gamma and beta, a
    // projection's kernel and bias.
    auto add = [&](const std::string& path, bool norm, Shape weight, Shape bias) {
      t.push_back({ours + path + (norm ? ".gamma" : ".kernel"), {hf + path + ".weight", weight}});
      t.push_back({ours + path + (norm ? ".beta" : ".bias"), {hf + path + ".bias", bias}});
    };
    add("self_attn_layer_norm", true, {C}, {C});
    for (const char* p :
         {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj"})
      add(p, false, {C, C}, {C});
    add("final_layer_norm", true, {C}, {C});
    add("fc1", false, {F, C}, {F});
    add("fc2", false, {C, F}, {C});
  }
  return t;
}

void write_hf_opt(OPT& model, const fs::path& dir, const HfSaveOptions& options) {
  const OPTConfig& c = model.config();
  write_hf_reshaped(model, dir, hf_tensors(c), options);
  const nlohmann::json cfg = {{"model_type", "opt"},
                              {"architectures", {"OPTForCausalLM"}},
                              {"vocab_size", c.vocab_size},
                              {"hidden_size", c.hidden_size},
                              {"word_embed_proj_dim", c.hidden_size},
                              {"ffn_dim", c.ffn_dim},
                              {"num_hidden_layers", c.num_hidden_layers},
                              {"num_attention_heads", c.num_attention_heads},
                              {"max_position_embeddings", c.max_position_embeddings},
                              {"do_layer_norm_before", true},
                              {"activation_function", "relu"},
                              {"enable_bias", true},
                              {"dropout", c.dropout},
                              {"tie_word_embeddings", c.tie_word_embeddings},
                              {"torch_dtype", options.torch_dtype()}};
  write_text((dir / "config.json").string(), cfg.dump(2) + "\n");
}

}  // namespace

std::map<std::string, std::string> opt_hf_names(const OPTConfig& config) {
  return hf_names(hf_tensors(config));
}

void load_opt_weights(OPT& model, const std::string& path) {
  load_hf_reshaped(model, path, hf_tensors(model.config()));
}

void save_hf_opt(OPT& model, const std::string& dir, const HfSaveOptions& options) {
  write_directory_atomically(dir, [&](const fs::path& out) { write_hf_opt(model, out, options); },
                             {.overwrite = options.overwrite, .read_names = hf_weight_files()});
}

}  // namespace autoshard
