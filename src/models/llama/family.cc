// The Llama family in the registry (autoshard/models/registry.h): Hugging
// Face model_type llama, mistral, qwen2, gemma and gemma2, and KerasHub's
// LlamaBackbone, Llama3Backbone, MistralBackbone, QwenBackbone and
// GemmaBackbone.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/registry.h"

namespace autoshard {

namespace {

class LlamaDecoder final : public ConfigOf<LlamaConfig> {
 public:
  using ConfigOf::ConfigOf;
  const ModelFamily& family() const override { return llama_family(); }
  keras_hub::Variables keras_hub_variables() const override {
    return keras_hub::llama_variables(config_);
  }
  nlohmann::json keras_hub_backbone() const override {
    return keras_hub::llama_backbone_config(config_);
  }
  std::string model_type() const override { return config_.model_type; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  const char* max_positions_field() const override { return "max_position_embeddings"; }
  int64_t layers() const override { return config_.num_hidden_layers; }
  const char* layers_field() const override { return "num_hidden_layers"; }
  int64_t attention_width() const override {
    return config_.num_attention_heads * config_.head_dim;
  }
  std::vector<SizeTerm> size_terms() const override {
    const LlamaConfig& c = config_;
    const double C = double(c.hidden_size), D = double(c.head_dim);
    const double attn = C * D * double(2 * c.num_attention_heads + 2 * c.num_key_value_heads);
    const double mlp = 3 * C * double(c.intermediate_size);
    const int heads = c.tie_word_embeddings ? 1 : 2;
    return {{double(c.vocab_size) * C * heads,
             cat("vocab_size = ", c.vocab_size, " x hidden_size = ", c.hidden_size,
                 heads == 2 ? " x 2 (embeddings and lm_head)" : "")},
            {double(c.num_hidden_layers) * (attn + mlp),
             cat("num_hidden_layers = ", c.num_hidden_layers, " x ", attn + mlp,
                 " parameters a layer (hidden_size = ", c.hidden_size,
                 ", intermediate_size = ", c.intermediate_size, ")")}};
  }
  int64_t lora_rank() const override { return config_.lora_rank; }
  std::shared_ptr<const DecoderConfig> with_lora(const LoraOptions& lora) const override {
    LlamaConfig c = config_;
    c.lora_rank = lora.rank;
    c.lora_alpha = lora.alpha;
    return std::make_shared<LlamaDecoder>(c);
  }
  std::shared_ptr<const DecoderConfig> with_layers(int64_t layers) const override {
    LlamaConfig c = config_;
    c.num_hidden_layers = layers;
    return std::make_shared<LlamaDecoder>(c);
  }
  std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const override {
    return std::make_unique<Llama>(config_, seq_len, seed);
  }
  LayoutMap megatron_layout(const std::string& model_axis) const override {
    return llama_megatron_layout(config_, model_axis);
  }
};

}  // namespace

std::shared_ptr<const DecoderConfig> llama_decoder(LlamaConfig config) {
  return std::make_shared<LlamaDecoder>(std::move(config));
}

namespace {

class LlamaFamily final : public ModelFamily {
 public:
  const char* name() const override { return "llama"; }
  std::vector<std::string> model_types() const override {
    return {"llama", "mistral", "qwen2", "gemma", "gemma2"};
  }
  std::shared_ptr<const DecoderConfig> read_hf(const ConfigReader& reader) const override {
    return llama_decoder(LlamaConfig::from_reader(reader));
  }
  std::vector<std::string> keras_hub_backbones() const override {
    return {"LlamaBackbone", "Llama3Backbone", "MistralBackbone", "QwenBackbone", "GemmaBackbone"};
  }
  // Llama 3's presets name their task LlamaCausalLM.
  bool keras_hub_task_matches(const std::string& backbone,
                              const std::string& task_class) const override {
    return ModelFamily::keras_hub_task_matches(backbone, task_class) ||
           (backbone == "Llama3Backbone" && task_class == "LlamaCausalLM");
  }
  nlohmann::json keras_hub_to_hf(const std::string& backbone, keras_hub::Fields& f) const override {
    return keras_hub::llama_hf_fields(backbone, f);
  }
  std::shared_ptr<const FamilyConfig> read_keras_hub(const ConfigReader& reader) const override {
    return llama_decoder(LlamaConfig::from_reader(reader));
  }
  std::shared_ptr<const FamilyConfig> config_of(const Model& model) const override {
    const auto* llama = dynamic_cast<const Llama*>(&model);
    return llama ? llama_decoder(llama->config()) : nullptr;
  }
  void load_weights(Model& model, const std::string& path) const override {
    load_llama_weights(dynamic_cast<Llama&>(model), path);
  }
  void save_hf(Model& model, const std::string& dir, const HfSaveOptions& options) const override {
    save_hf_llama(dynamic_cast<Llama&>(model), dir, options);
  }
};

}  // namespace

const ModelFamily& llama_family() {
  static const LlamaFamily family;
  return family;
}

}  // namespace autoshard
