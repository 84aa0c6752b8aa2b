#include "autoshard/models/language_model.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/runtime/memory.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {
LanguageModelConfig with(std::shared_ptr<const DecoderConfig> config) {
  return LanguageModelConfig(std::move(config));
}

// The family names in the order registered: "gpt2, llama, mistral, ...".
std::string known_model_types() {
  std::string known;
  for (const ModelFamily* f : model_families())
    for (const std::string& type : f->model_types())
      if (!type.empty()) known += (known.empty() ? "" : ", ") + type;
  return known;
}

LanguageModelConfig from_config_file(const std::string& path) {
  const ConfigReader reader = ConfigReader::from_file(path);
  const std::string type = reader.model_type();
  if (const ModelFamily* family = family_of_model_type(type)) return with(family->read_hf(reader));
  fail(reader.where("model_type"), " is '", type,
       "', which this build does not know (known: ", known_model_types(), ")");
}

// A KerasHub preset directory's backbone; the command line runs decoders.
LanguageModelConfig from_keras_hub_preset(const std::string& dir) {
  std::shared_ptr<const FamilyConfig> config = keras_hub::preset_config(dir);
  auto decoder = std::dynamic_pointer_cast<const DecoderConfig>(config);
  if (!decoder)
    fail("KerasHub preset: a ", config->keras_hub_variables().class_name,
         " is an encoder; the command line runs decoders (load it from C++: "
         "autoshard/models/keras_hub_model.h)");
  return with(std::move(decoder));
}

LanguageModelConfig of_name_or_path(const std::string& name_or_path) {
  for (const ModelFamily* f : model_families())
    if (auto config = f->read_file(name_or_path)) return with(std::move(config));
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
  return with(model_families().front()->named(name_or_path));
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

LanguageModelConfig::LanguageModelConfig() : config(model_families().front()->named("gpt2")) {}

LanguageModelConfig::LanguageModelConfig(std::shared_ptr<const DecoderConfig> c)
    : config(std::move(c)) {}

LanguageModelConfig LanguageModelConfig::of(const std::string& name_or_path) {
  LanguageModelConfig c = of_name_or_path(name_or_path);
  c.source = name_or_path;
  return c;
}

void LanguageModelConfig::check_fits() const {
  const std::optional<int64_t> available = available_memory_bytes();
  if (!available) return;
  const std::vector<SizeTerm> terms = config->size_terms();
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

double LanguageModelConfig::parameters() const {
  double total = 0;
  for (const SizeTerm& t : config->size_terms()) total += t.parameters;
  return total;
}

std::unique_ptr<Model> LanguageModelConfig::build(int64_t seq_len, uint64_t seed) const {
  check_fits();
  return config->build(seq_len, seed);
}

LanguageModelConfig LanguageModelConfig::with_layers(int64_t layers) const {
  LanguageModelConfig c = *this;
  c.config = config->with_layers(layers);
  return c;
}

void load_language_model_weights(Model& model, const std::string& path) {
  if (keras_hub::is_preset(path)) return keras_hub::load_preset_weights(model, path);
  config_of_model(model)->family().load_weights(model, path);
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
  config_of_model(model)->family().save_hf(model, dir, options);
}

}  // namespace autoshard
