// The decoder language models this build knows (GPT-2; Llama, Mistral, Qwen2
// and Gemma 1 and 2; OPT), behind one description: what the command line needs to build,
// load, plan and feed any of them.
// The decoder language models this build knows (GPT-2; Llama, Mistral, Qwen2
// and Gemma 1 and 2; OPT: the families of autoshard/models/registry.h),
// behind one description: what the command line and Python need to build,
// load, plan and feed any of them.
#pragma once

#include <memory>
#include <string>

#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/models/registry.h"

namespace autoshard {

struct LanguageModelConfig {
  // A default GPT-2 (the first family's "gpt2").
  LanguageModelConfig();
  explicit LanguageModelConfig(std::shared_ptr<const DecoderConfig> config);

  std::shared_ptr<const DecoderConfig> config;
  // What it was read from (a preset name, a config.json), for errors.
  std::string source;
  // Bytes a run holds for each parameter, for the memory check of build():
  // 4, the weights (eval, generate, convert); 16 to train (gradients and
  // AdamW's two moments too); 0 to plan (nothing is allocated).
  double bytes_per_parameter = 4;

  // A model name the first family knows ("gpt2-medium"), a config.json, a
  // Hugging Face model directory (its config.json's model_type picks the
  // family), a KerasHub preset (its backbone class picks it) or a file of a
  // family's own format (llm.c's .bin).
  static LanguageModelConfig of(const std::string& name_or_path);

  const ModelFamily& family() const { return config->family(); }
  std::string model_type() const { return config->model_type(); }
  int64_t vocab_size() const { return config->vocab_size(); }
  int64_t max_positions() const { return config->max_positions(); }
  // The config field that sets it (n_positions, max_position_embeddings).
  const char* max_positions_field() const { return config->max_positions_field(); }
  int64_t layers() const { return config->layers(); }
  // Width of attention's scores and values (heads x head dim), for model FLOPs.
  int64_t attention_width() const { return config->attention_width(); }
  // The parameter count, from the config alone (nothing is built).
  double parameters() const;
  // The field that sets the number of layers (n_layer, num_hidden_layers).
  const char* layers_field() const { return config->layers_field(); }
  // The same model with `layers` blocks.
  LanguageModelConfig with_layers(int64_t layers) const;
  // Throws an error naming the config's largest term unless the model fits
  // the memory available (AUTOSHARD_MEMORY_LIMIT caps it): its parameters at
  // bytes_per_parameter (not counted under mpirun, where each rank holds a
  // share) and the bookkeeping of building and tracing each layer.
  void check_fits() const;
  // Builds the model, after check_fits(): no command builds the layers of a
  // model too large for the machine.
  std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const;
  // Megatron-LM's tensor-parallel layout for these weight paths.
  LayoutMap megatron_layout(const std::string& model_axis = "model") const {
    return config->megatron_layout(model_axis);
  }
  // Its KerasHub backbone's variables (autoshard/io/keras_hub.h).
  keras_hub::Variables keras_hub_variables() const { return config->keras_hub_variables(); }

  // The family's own config type, for code that knows the family (its
  // folder, tests): null when the model is of another family.
  template <typename C>
  const C* get_if() const {
    return config_as<C>(*config);
  }
};

// Loads a model's weights from a Hugging Face directory, an autoshard
// checkpoint, or (GPT-2) a .safetensors or llm.c file.
void load_language_model_weights(Model& model, const std::string& path);
// True when `path` is a directory holding weights load_language_model_weights
// reads (model.safetensors or its index: Hugging Face and checkpoints; a
// KerasHub preset's model.weights.h5 or model.weights.json).
bool holds_language_model_weights(const std::string& path);
// Writes a model built from a LanguageModelConfig as a Hugging Face directory
// (GPT-2: F32 in one file, the only options it takes).
void save_language_model_hf(Model& model, const std::string& dir,
                            const HfSaveOptions& options = {});

}  // namespace autoshard
