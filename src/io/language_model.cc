#include "autoshard/io/language_model.h"

#include <filesystem>

#include "autoshard/error.h"
#include "autoshard/io/gpt2_formats.h"
#include "autoshard/io/llama_formats.h"
#include "autoshard/io/opt_formats.h"
#include "nn/models/config_reader.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {
template <typename... F>
struct Overload : F... {
  using F::operator()...;
};
template <typename... F>
Overload(F...) -> Overload<F...>;

LanguageModelConfig from_config_file(const std::string& path) {
  const ConfigReader reader = ConfigReader::from_file(path);
  const std::string type = reader.model_type();
  if (type.empty() || type == "gpt2") return {GPT2Config::from_reader(reader)};
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "gemma")
    return {LlamaConfig::from_reader(reader)};
  if (type == "opt") return {OPTConfig::from_reader(reader)};
  fail(reader.where("model_type"), " is '", type,
       "', which this build does not know (known: gpt2, llama, mistral, qwen2, gemma, opt)");
}
}  // namespace

LanguageModelConfig LanguageModelConfig::of(const std::string& name_or_path) {
  if (name_or_path.ends_with(".bin")) return {gpt2_config_of(name_or_path)};
  if (fs::is_directory(name_or_path)) {
    const fs::path config = fs::path(name_or_path) / "config.json";
    AS_CHECK(fs::exists(config), "'", name_or_path, "' has no config.json");
    return from_config_file(config.string());
  }
  if (name_or_path.ends_with(".safetensors"))
    return from_config_file((fs::path(name_or_path).parent_path() / "config.json").string());
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json"))
    return from_config_file(name_or_path);
  return {GPT2Config::preset(name_or_path)};
}

int64_t LanguageModelConfig::vocab_size() const {
  return std::visit([](const auto& c) { return c.vocab_size; }, config);
}
int64_t LanguageModelConfig::max_positions() const {
  return std::visit(Overload{[](const GPT2Config& c) { return c.n_positions; },
                             [](const LlamaConfig& c) { return c.max_position_embeddings; },
                             [](const OPTConfig& c) { return c.max_position_embeddings; }},
                    config);
}
const char* LanguageModelConfig::max_positions_field() const {
  return std::holds_alternative<GPT2Config>(config) ? "n_positions" : "max_position_embeddings";
}
int64_t LanguageModelConfig::layers() const {
  return std::visit(Overload{[](const GPT2Config& c) { return c.n_layer; },
                             [](const LlamaConfig& c) { return c.num_hidden_layers; },
                             [](const OPTConfig& c) { return c.num_hidden_layers; }},
                    config);
}
int64_t LanguageModelConfig::attention_width() const {
  return std::visit(
      Overload{[](const GPT2Config& c) { return c.n_embd; },
               [](const LlamaConfig& c) { return c.num_attention_heads * c.head_dim; },
               [](const OPTConfig& c) { return c.hidden_size; }},
      config);
}

double LanguageModelConfig::parameters() const {
  return std::visit(
      Overload{[](const GPT2Config& c) {
                 const double C = double(c.n_embd);
                 return double(c.vocab_size + c.n_positions) * C + double(c.n_layer) * 12 * C * C;
               },
               [](const LlamaConfig& c) {
                 const double C = double(c.hidden_size), D = double(c.head_dim);
                 const double attn =
                     C * D * double(2 * c.num_attention_heads + 2 * c.num_key_value_heads);
                 const double mlp = 3 * C * double(c.intermediate_size);
                 return double(c.vocab_size) * C * (c.tie_word_embeddings ? 1 : 2) +
                        double(c.num_hidden_layers) * (attn + mlp);
               },
               [](const OPTConfig& c) {
                 const double C = double(c.hidden_size), F = double(c.ffn_dim);
                 // q, k, v, out and fc1, fc2 with biases; two LayerNorms.
                 const double block = 4 * C * C + 2 * C * F + 9 * C + F;
                 return double(c.vocab_size) * C * (c.tie_word_embeddings ? 1 : 2) +
                        double(c.max_position_embeddings + OPT::kPositionOffset) * C +
                        double(c.num_hidden_layers) * block + 2 * C;
               }},
      config);
}

std::unique_ptr<Model> LanguageModelConfig::build(int64_t seq_len, uint64_t seed) const {
  return std::visit(Overload{[&](const GPT2Config& c) -> std::unique_ptr<Model> {
                               return std::make_unique<GPT2>(c, seq_len, seed);
                             },
                             [&](const LlamaConfig& c) -> std::unique_ptr<Model> {
                               return std::make_unique<Llama>(c, seq_len, seed);
                             },
                             [&](const OPTConfig& c) -> std::unique_ptr<Model> {
                               return std::make_unique<OPT>(c, seq_len, seed);
                             }},
                    config);
}

LayoutMap LanguageModelConfig::megatron_layout(const std::string& model_axis) const {
  if (const auto* llama = std::get_if<LlamaConfig>(&config))
    return llama_megatron_layout(*llama, model_axis);
  if (const auto* opt = std::get_if<OPTConfig>(&config))
    return opt_megatron_layout(*opt, model_axis);
  return gpt2_megatron_layout(model_axis);
}

void load_language_model_weights(Model& model, const std::string& path) {
  if (auto* gpt2 = dynamic_cast<GPT2*>(&model)) return load_gpt2_weights(*gpt2, path);
  if (auto* llama = dynamic_cast<Llama*>(&model)) return load_llama_weights(*llama, path);
  if (auto* opt = dynamic_cast<OPT*>(&model)) return load_opt_weights(*opt, path);
  fail("internal: no weight loader for model '", model.name(), "'");
}

void save_language_model_hf(Model& model, const std::string& dir, const HfSaveOptions& options) {
  if (auto* llama = dynamic_cast<Llama*>(&model)) return save_hf_llama(*llama, dir, options);
  if (auto* opt = dynamic_cast<OPT*>(&model)) return save_hf_opt(*opt, dir, options);
  auto* gpt2 = dynamic_cast<GPT2*>(&model);
  AS_CHECK(gpt2, "internal: no Hugging Face writer for model '", model.name(), "'");
  AS_CHECK(options.dtype == "F32" && options.max_shard_bytes == 0,
           "GPT-2 directories are written as F32 in one model.safetensors (no --dtype, no "
           "--max-shard-size)");
  save_hf_gpt2(*gpt2, dir);
}

}  // namespace autoshard
