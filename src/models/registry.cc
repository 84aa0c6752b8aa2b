#include "autoshard/models/registry.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/models/bert/bert.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/models/opt/opt.h"
#include "autoshard/models/phi3/phi3.h"

namespace autoshard {

const std::vector<const ModelFamily*>& model_families() {
  // One line a family. The first reads bare model names and config.json
  // files without a model_type.
  static const std::vector<const ModelFamily*> families = {
      &gpt2_family(),
      &phi3_family(),  // before llama: its models are Llamas of model_type phi3
      &llama_family(), &opt_family(), &bert_family(),
  };
  return families;
}

const ModelFamily* family_of_model_type(const std::string& model_type) {
  for (const ModelFamily* f : model_families()) {
    const std::vector<std::string> types = f->model_types();
    if (std::find(types.begin(), types.end(), model_type) != types.end()) return f;
  }
  return nullptr;
}

const ModelFamily* family_of_backbone(const std::string& class_name) {
  for (const ModelFamily* f : model_families()) {
    const std::vector<std::string> classes = f->keras_hub_backbones();
    if (std::find(classes.begin(), classes.end(), class_name) != classes.end()) return f;
  }
  return nullptr;
}

std::shared_ptr<const FamilyConfig> config_of_model(const Model& model) {
  for (const ModelFamily* f : model_families())
    if (std::shared_ptr<const FamilyConfig> c = f->config_of(model)) return c;
  fail("internal: model '", model.name(), "' belongs to no model family");
}

std::shared_ptr<const EncoderConfig> encoder_config(const std::string& dir) {
  if (keras_hub::is_preset(dir)) {
    auto encoder = std::dynamic_pointer_cast<const EncoderConfig>(keras_hub::preset_config(dir));
    AS_CHECK(encoder, "KerasHub preset '", dir, "' is not a BertBackbone or RobertaBackbone");
    return encoder;
  }
  // The one encoder family reads any Hugging Face encoder (its reader names
  // a model_type it does not run); a second would be chosen by model_type.
  for (const ModelFamily* f : model_families())
    if (f->encoder()) return f->read_hf_encoder(dir);
  fail("internal: no encoder family is registered");
}

// What a family or config without the capability answers.

nlohmann::json FamilyConfig::keras_hub_task() const {
  return nlohmann::json::object();
}

std::shared_ptr<const DecoderConfig> DecoderConfig::with_lora(const LoraOptions&) const {
  fail("enable_lora: autoshard runs LoRA on GPT-2, OPT, Phi-3 and the Llama family (Llama, ",
       "Llama 3, Mistral, Qwen, Gemma); this model is ", model_type());
}

void DecoderConfig::convert_to_file(const std::string&, const std::string&) const {
  fail("convert: llm.c .bin files hold GPT-2 only; give OUT a directory name");
}

std::shared_ptr<const DecoderConfig> ModelFamily::read_hf(const ConfigReader&) const {
  fail("internal: model family '", name(), "' reads no decoder config");
}

std::shared_ptr<const EncoderConfig> ModelFamily::read_hf_encoder(const std::string&) const {
  fail("internal: model family '", name(), "' has no encoder");
}

std::shared_ptr<const DecoderConfig> ModelFamily::named(const std::string&) const {
  return nullptr;
}

std::shared_ptr<const DecoderConfig> ModelFamily::read_file(const std::string&) const {
  return nullptr;
}

bool ModelFamily::keras_hub_task_matches(const std::string& backbone,
                                         const std::string& task_class) const {
  const std::string family = backbone.substr(0, backbone.size() - std::string("Backbone").size());
  return task_class == family + (encoder() ? "TextClassifier" : "CausalLM");
}

void ModelFamily::load_weights(Model& model, const std::string&) const {
  fail("internal: no weight loader for model '", model.name(), "'");
}

void ModelFamily::save_hf(Model& model, const std::string&, const HfSaveOptions&) const {
  fail("internal: no Hugging Face writer for model '", model.name(), "'");
}

}  // namespace autoshard
