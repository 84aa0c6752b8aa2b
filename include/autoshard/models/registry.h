// The model families this build knows (GPT-2; Llama with Mistral, Qwen2 and
// Gemma 1 and 2; OPT; BERT and RoBERTa), each behind one interface. A family
// lives in its own folder, src/models/<family>/ (its layers and model, its
// config reader, its Hugging Face tensor names, its KerasHub variables and
// config) and registers one ModelFamily in src/models/registry.cc; the
// readers, writers, command line and Python ask the registry, never a family
// by name. See docs/architecture.md, "Model families".
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/keras_hub.h"
#include "autoshard/nn/lora.h"
#include "autoshard/nn/model.h"
#include "autoshard/plan/distribution.h"

namespace autoshard {

class ConfigReader;
class ModelFamily;
namespace keras_hub {
class Fields;
}

// A part of a model's parameter count, and the config fields that make it
// (named in the errors of a model too large for the machine).
struct SizeTerm {
  double parameters;
  std::string fields;
};

// One model's config, whatever its family: what a KerasHub preset needs.
class FamilyConfig {
 public:
  virtual ~FamilyConfig() = default;
  virtual const ModelFamily& family() const = 0;
  // Every Keras variable of its KerasHub backbone (and task head) and the
  // autoshard weight each holds (autoshard/io/keras_hub.h).
  virtual keras_hub::Variables keras_hub_variables() const = 0;
  // The backbone's KerasHub config (config.json's "config"); what KerasHub
  // cannot express is an error.
  virtual nlohmann::json keras_hub_backbone() const = 0;
  // Fields task.json adds to its config; empty (a CausalLM) or a
  // TextClassifier's num_classes, activation and dropout.
  virtual nlohmann::json keras_hub_task() const;
};

// A decoder language model's config: what the commands need to build, load,
// plan and feed any of them.
class DecoderConfig : public FamilyConfig {
 public:
  // Its Hugging Face model_type ("gpt2", "llama", "gemma2", "opt", ...).
  virtual std::string model_type() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_positions() const = 0;
  // The config field that sets it (n_positions, max_position_embeddings).
  virtual const char* max_positions_field() const = 0;
  virtual int64_t layers() const = 0;
  // The field that sets the number of layers (n_layer, num_hidden_layers).
  virtual const char* layers_field() const = 0;
  // Width of attention's scores and values (heads x head dim), for model FLOPs.
  virtual int64_t attention_width() const = 0;
  // The parameter count term by term, from the config alone.
  virtual std::vector<SizeTerm> size_terms() const = 0;
  // The same config with `layers` blocks (pipeline stages are priced so).
  virtual std::shared_ptr<const DecoderConfig> with_layers(int64_t layers) const = 0;
  virtual std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const = 0;
  // Megatron-LM's tensor-parallel layout for its weight paths.
  virtual LayoutMap megatron_layout(const std::string& model_axis) const = 0;
  // The rank of its LoRA adapters (autoshard/nn/lora.h); 0 without.
  virtual int64_t lora_rank() const { return 0; }
  // The same config with LoRA adapters `lora` on the attention's query and
  // value projections (KerasHub's Backbone.enable_lora); a family without
  // them refuses.
  virtual std::shared_ptr<const DecoderConfig> with_lora(const LoraOptions& lora) const;
  // Converts the weights at `in` into the single file `out` of a format only
  // this family has (GPT-2: llm.c's .bin); others refuse.
  virtual void convert_to_file(const std::string& in, const std::string& out) const;
};

// An encoder with its task head (BERT, RoBERTa): what autoshard.keras_hub's
// TextClassifier and MaskedLM need to build, load and retarget any of them.
class EncoderConfig : public FamilyConfig {
 public:
  // Its Hugging Face model_type ("bert", "roberta").
  virtual std::string model_type() const = 0;
  virtual int64_t vocab_size() const = 0;
  // The longest sequence its positions hold.
  virtual int64_t max_sequence() const = 0;
  // The head: a masked-LM head, else a classifier of num_labels() classes.
  virtual bool masked_lm() const = 0;
  virtual int64_t num_labels() const = 0;
  // The same backbone with another head (a masked-LM head, or a classifier
  // of `num_labels` classes), as KerasHub builds a task of another class or
  // size around a preset's backbone; a head the family cannot put on this
  // backbone is an error.
  virtual std::shared_ptr<const EncoderConfig> with_head(bool masked_lm,
                                                         int64_t num_labels) const = 0;
  // The rank of its LoRA adapters (autoshard/nn/lora.h); 0 without.
  virtual int64_t lora_rank() const = 0;
  // The same config with LoRA adapters on the attention's query and value.
  virtual std::shared_ptr<const EncoderConfig> with_lora(const LoraOptions& lora) const = 0;
  virtual std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const = 0;
  // Megatron-LM's tensor-parallel layout for its weight paths.
  virtual LayoutMap megatron_layout(const std::string& model_axis) const = 0;
};

// A family's config type C held as a DecoderConfig (or FamilyConfig); get()
// gives it back to code that knows the family (its folder, tests).
template <typename C, typename Base = DecoderConfig>
class ConfigOf : public Base {
 public:
  explicit ConfigOf(C config) : config_(std::move(config)) {}
  const C& get() const { return config_; }

 protected:
  C config_;
};

// The family's own config type C held in `config`, or null (another family).
template <typename C>
const C* config_as(const FamilyConfig& config) {
  if (const auto* decoder = dynamic_cast<const ConfigOf<C, DecoderConfig>*>(&config))
    return &decoder->get();
  if (const auto* encoder = dynamic_cast<const ConfigOf<C, EncoderConfig>*>(&config))
    return &encoder->get();
  if (const auto* other = dynamic_cast<const ConfigOf<C, FamilyConfig>*>(&config))
    return &other->get();
  return nullptr;
}

// One model family: how each reader finds its configs and weights.
class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // "gpt2", "llama", "opt", "bert": its folder.
  virtual const char* name() const = 0;

  // The Hugging Face model_type values its decoder reads ("" for a config.json
  // without one); none for an encoder, which the commands do not run.
  virtual std::vector<std::string> model_types() const { return {}; }
  // Its decoder's config from a Hugging Face config.json.
  virtual std::shared_ptr<const DecoderConfig> read_hf(const ConfigReader& reader) const;
  // An encoder family's config of a Hugging Face directory (its config.json).
  virtual std::shared_ptr<const EncoderConfig> read_hf_encoder(const std::string& dir) const;
  // A model by a bare name ("gpt2-medium"); only the first family registered
  // is asked.
  virtual std::shared_ptr<const DecoderConfig> named(const std::string& name) const;
  // A whole model in one file of its own format (llm.c's .bin), else null.
  virtual std::shared_ptr<const DecoderConfig> read_file(const std::string& path) const;

  // The KerasHub backbone classes it reads.
  virtual std::vector<std::string> keras_hub_backbones() const = 0;
  // Whether its backbones are encoders, which run with a TextClassifier head.
  virtual bool encoder() const { return false; }
  // Whether task.json's `task_class` goes with `backbone` (default: the
  // backbone's CausalLM, or an encoder's TextClassifier).
  virtual bool keras_hub_task_matches(const std::string& backbone,
                                      const std::string& task_class) const;
  // A KerasHub backbone config rewritten as the Hugging Face config.json the
  // same model has (keras-hub's convert_<family>.py in reverse), so that both
  // ways in share read_keras_hub's checks; every field it reads goes through
  // `fields`, and one it does not run is an error naming it.
  virtual nlohmann::json keras_hub_to_hf(const std::string& backbone,
                                         keras_hub::Fields& fields) const = 0;
  // The config of those Hugging Face fields (keras_hub_to_hf's, with the task's).
  virtual std::shared_ptr<const FamilyConfig> read_keras_hub(const ConfigReader& reader) const = 0;

  // The config of `model` when this family built it, else null.
  virtual std::shared_ptr<const FamilyConfig> config_of(const Model& model) const = 0;
  // Loads a model it built from a Hugging Face directory, an autoshard
  // checkpoint or a file of its own format.
  virtual void load_weights(Model& model, const std::string& path) const;
  // Writes a model it built as a Hugging Face directory.
  virtual void save_hf(Model& model, const std::string& dir, const HfSaveOptions& options) const;
};

// Every family this build knows, in registration order.
const std::vector<const ModelFamily*>& model_families();
// The family whose decoder reads Hugging Face `model_type`, or null.
const ModelFamily* family_of_model_type(const std::string& model_type);
// The family that reads the KerasHub backbone `class_name`, or null.
const ModelFamily* family_of_backbone(const std::string& class_name);
// The config of a model some family built; an error for any other model.
std::shared_ptr<const FamilyConfig> config_of_model(const Model& model);
// The encoder (with its head) of a Hugging Face directory or a KerasHub
// preset; an error naming the backbone for a decoder's preset.
std::shared_ptr<const EncoderConfig> encoder_config(const std::string& dir);

}  // namespace autoshard
