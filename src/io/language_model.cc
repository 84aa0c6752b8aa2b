#include "autoshard/io/language_model.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/gpt2_formats.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/io/llama_formats.h"
#include "autoshard/io/opt_formats.h"
#include "autoshard/runtime/memory.h"
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

template <typename Config>
LanguageModelConfig with(Config config) {
  LanguageModelConfig m;
  m.config = std::move(config);
  return m;
}

LanguageModelConfig from_config_file(const std::string& path) {
  const ConfigReader reader = ConfigReader::from_file(path);
  const std::string type = reader.model_type();
  if (type.empty() || type == "gpt2") return with(GPT2Config::from_reader(reader));
  if (type == "llama" || type == "mistral" || type == "qwen2" || type == "gemma" ||
      type == "gemma2")
    return with(LlamaConfig::from_reader(reader));
  if (type == "opt") return with(OPTConfig::from_reader(reader));
  fail(
      reader.where("model_type"), " is '", type,
      "', which this build does not know (known: gpt2, llama, mistral, qwen2, gemma, gemma2, opt)");
}

// A KerasHub preset directory's backbone; the command line runs decoders.
LanguageModelConfig from_keras_hub_preset(const std::string& dir) {
  return std::visit(
      Overload{[](const BertConfig& c) -> LanguageModelConfig {
                 fail("KerasHub preset: a ", c.roberta() ? "RobertaBackbone" : "BertBackbone",
                      " is an encoder; the command line runs decoders (load it from C++: "
                      "autoshard/io/keras_hub_preset.h)");
               },
               [](const auto& c) -> LanguageModelConfig { return with(c); }},
      keras_hub::preset_config(dir));
}

LanguageModelConfig of_name_or_path(const std::string& name_or_path) {
  if (name_or_path.ends_with(".bin")) return with(gpt2_config_of(name_or_path));
  if (keras_hub::is_preset(name_or_path)) return from_keras_hub_preset(name_or_path);
  if (fs::is_directory(name_or_path)) {
    const fs::path config = fs::path(name_or_path) / "config.json";
    std::error_code ec;
    AS_CHECK(fs::exists(fs::symlink_status(config, ec)), "'", name_or_path, "' has no config.json");
    return from_config_file(file_in_directory(name_or_path, "config.json", "model config"));
  }
  if (name_or_path.ends_with(".safetensors")) {
    const fs::path dir = fs::path(name_or_path).parent_path();
    return from_config_file(
        file_in_directory(dir.empty() ? "." : dir.string(), "config.json", "model config"));
  }
  if (name_or_path.find('/') != std::string::npos || name_or_path.ends_with(".json"))
    return from_config_file(name_or_path);
  return with(GPT2Config::preset(name_or_path));
}

// A part of the parameter count, and the config fields that make it.
struct SizeTerm {
  double parameters;
  std::string fields;
};

// The parameter count term by term, from the config alone.
std::vector<SizeTerm> size_terms(const LanguageModelConfig& m) {
  return std::visit(
      Overload{[](const GPT2Config& c) -> std::vector<SizeTerm> {
                 const double C = double(c.n_embd);
                 return {
                     {double(c.vocab_size) * C,
                      cat("vocab_size = ", c.vocab_size, " x n_embd = ", c.n_embd)},
                     {double(c.n_positions) * C,
                      cat("n_positions = ", c.n_positions, " x n_embd = ", c.n_embd)},
                     {double(c.n_layer) * 12 * C * C,
                      cat("n_layer = ", c.n_layer, " x 12 n_embd^2 (n_embd = ", c.n_embd, ")")}};
               },
               [](const LlamaConfig& c) -> std::vector<SizeTerm> {
                 const double C = double(c.hidden_size), D = double(c.head_dim);
                 const double attn =
                     C * D * double(2 * c.num_attention_heads + 2 * c.num_key_value_heads);
                 const double mlp = 3 * C * double(c.intermediate_size);
                 const int heads = c.tie_word_embeddings ? 1 : 2;
                 return {{double(c.vocab_size) * C * heads,
                          cat("vocab_size = ", c.vocab_size, " x hidden_size = ", c.hidden_size,
                              heads == 2 ? " x 2 (embeddings and lm_head)" : "")},
                         {double(c.num_hidden_layers) * (attn + mlp),
                          cat("num_hidden_layers = ", c.num_hidden_layers, " x ", attn + mlp,
                              " parameters a layer (hidden_size = ", c.hidden_size,
                              ", intermediate_size = ", c.intermediate_size, ")")}};
               },
               [](const OPTConfig& c) -> std::vector<SizeTerm> {
                 const double C = double(c.hidden_size), F = double(c.ffn_dim);
                 // q, k, v, out and fc1, fc2 with biases; two LayerNorms.
                 const double block = 4 * C * C + 2 * C * F + 9 * C + F;
                 const int heads = c.tie_word_embeddings ? 1 : 2;
                 return {{double(c.vocab_size) * C * heads,
                          cat("vocab_size = ", c.vocab_size, " x hidden_size = ", c.hidden_size,
                              heads == 2 ? " x 2 (embeddings and lm_head)" : "")},
                         {double(c.max_position_embeddings + OPT::kPositionOffset) * C,
                          cat("max_position_embeddings = ", c.max_position_embeddings,
                              " x hidden_size = ", c.hidden_size)},
                         {double(c.num_hidden_layers) * block,
                          cat("num_hidden_layers = ", c.num_hidden_layers, " x ", block,
                              " parameters a layer (hidden_size = ", c.hidden_size,
                              ", ffn_dim = ", c.ffn_dim, ")")},
                         {2 * C, "the final layer norm"}};
               }},
      m.config);
}

// What building and tracing one layer's step takes besides its parameters
// (layer objects, graph nodes, the planner's strategies): about 0.4 MiB a
// Llama block measured when planning, rounded up.
constexpr double kLayerBookkeepingBytes = 1 << 20;

// What a run keeps of each parameter, at `bytes_per_parameter`.
std::string kept(double bytes_per_parameter) {
  if (bytes_per_parameter >= 16) return "weights, gradients, AdamW state";
  return cat(bytes_per_parameter, " bytes each");
}

}  // namespace

LanguageModelConfig LanguageModelConfig::of(const std::string& name_or_path) {
  LanguageModelConfig c = of_name_or_path(name_or_path);
  c.source = name_or_path;
  return c;
}

const char* LanguageModelConfig::layers_field() const {
  return std::holds_alternative<GPT2Config>(config) ? "n_layer" : "num_hidden_layers";
}

void LanguageModelConfig::check_fits() const {
  const std::optional<int64_t> available = available_memory_bytes();
  if (!available) return;
  const std::vector<SizeTerm> terms = size_terms(*this);
  double params = 0;
  for (const SizeTerm& t : terms) params += t.parameters;
  const double weights = World::process().distributed() ? 0 : params * bytes_per_parameter;
  const double bookkeeping = double(layers()) * kLayerBookkeepingBytes;
  if (weights + bookkeeping <= double(*available)) return;
  const std::string where = cat("model config '", source, "': ");
  const std::string have = cat(format_bytes(double(*available)),
                               " is available (AUTOSHARD_MEMORY_LIMIT caps it); use a smaller "
                               "config or a machine with more memory");
  if (bookkeeping > weights)
    fail(where, layers_field(), " = ", layers(), ": building and tracing ", layers(),
         " layers takes about ", format_bytes(bookkeeping), " (",
         format_bytes(kLayerBookkeepingBytes), " a layer)",
         weights > 0 ? cat(", their parameters ", format_bytes(weights), " more (",
                           kept(bytes_per_parameter), "),")
                     : "",
         " but ", have);
  const SizeTerm& worst = *std::max_element(
      terms.begin(), terms.end(),
      [](const SizeTerm& a, const SizeTerm& b) { return a.parameters < b.parameters; });
  fail(where, worst.fields, " gives ", worst.parameters, " parameters; ",
       bytes_per_parameter >= 16 ? "training" : "holding", " the model's ", params,
       " parameters needs ", format_bytes(weights), " (", kept(bytes_per_parameter), ") but ",
       have);
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
  double total = 0;
  for (const SizeTerm& t : size_terms(*this)) total += t.parameters;
  return total;
}

std::unique_ptr<Model> LanguageModelConfig::build(int64_t seq_len, uint64_t seed) const {
  check_fits();
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
  if (keras_hub::is_preset(path)) return keras_hub::load_preset_weights(model, path);
  if (auto* gpt2 = dynamic_cast<GPT2*>(&model)) return load_gpt2_weights(*gpt2, path);
  if (auto* llama = dynamic_cast<Llama*>(&model)) return load_llama_weights(*llama, path);
  if (auto* opt = dynamic_cast<OPT*>(&model)) return load_opt_weights(*opt, path);
  fail("internal: no weight loader for model '", model.name(), "'");
}

bool holds_language_model_weights(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir(path);
  if (!fs::is_directory(dir, ec)) return false;
  const bool preset = keras_hub::is_preset(path);
  for (const char* name : {"model.safetensors", "model.safetensors.index.json"})
    if (!preset && fs::is_regular_file(dir / name, ec)) return true;
  for (const char* name : {"model.weights.h5", "model.weights.json"})
    if (preset && fs::is_regular_file(dir / name, ec)) return true;
  return false;
}

void save_language_model_hf(Model& model, const std::string& dir, const HfSaveOptions& options) {
  if (auto* llama = dynamic_cast<Llama*>(&model)) return save_hf_llama(*llama, dir, options);
  if (auto* opt = dynamic_cast<OPT*>(&model)) return save_hf_opt(*opt, dir, options);
  auto* gpt2 = dynamic_cast<GPT2*>(&model);
  AS_CHECK(gpt2, "internal: no Hugging Face writer for model '", model.name(), "'");
  AS_CHECK(options.dtype == "F32" && options.max_shard_bytes == 0,
           "GPT-2 directories are written as F32 in one model.safetensors (no --dtype, no "
           "--max-shard-size)");
  save_hf_gpt2(*gpt2, dir, options.overwrite);
}

}  // namespace autoshard
