// The Phi-3 family in the registry (autoshard/models/registry.h): Hugging
// Face model_type phi3 and KerasHub's Phi3Backbone. Its models are the
// Llama family's (a Llama of model_type "phi3"); its files are its own.
#include <nlohmann/json.hpp>

#include "autoshard/models/config_reader.h"
#include "autoshard/models/phi3/phi3.h"
#include "autoshard/models/registry.h"

namespace autoshard {

namespace {

// Phi-3's config: the Llama decoder's answers, with Phi-3's family and
// KerasHub backbone.
class Phi3Decoder final : public ConfigOf<LlamaConfig> {
 public:
  explicit Phi3Decoder(LlamaConfig config) : ConfigOf(config), llama_(llama_decoder(config)) {}
  const ModelFamily& family() const override { return phi3_family(); }
  keras_hub::Variables keras_hub_variables() const override {
    return keras_hub::phi3_variables(config_);
  }
  nlohmann::json keras_hub_backbone() const override {
    return keras_hub::phi3_backbone_config(config_);
  }
  std::string model_type() const override { return "phi3"; }
  int64_t vocab_size() const override { return llama_->vocab_size(); }
  int64_t max_positions() const override { return llama_->max_positions(); }
  const char* max_positions_field() const override { return llama_->max_positions_field(); }
  int64_t layers() const override { return llama_->layers(); }
  const char* layers_field() const override { return llama_->layers_field(); }
  int64_t attention_width() const override { return llama_->attention_width(); }
  std::vector<SizeTerm> size_terms() const override { return llama_->size_terms(); }
  int64_t lora_rank() const override { return llama_->lora_rank(); }
  // Llama's adapters; the weights stay Phi-3's (its fused tensors).
  std::shared_ptr<const DecoderConfig> with_lora(const LoraOptions& lora) const override {
    LlamaConfig c = config_;
    c.lora_rank = lora.rank;
    c.lora_alpha = lora.alpha;
    return std::make_shared<Phi3Decoder>(c);
  }
  std::shared_ptr<const DecoderConfig> with_layers(int64_t layers) const override {
    LlamaConfig c = config_;
    c.num_hidden_layers = layers;
    return std::make_shared<Phi3Decoder>(c);
  }
  std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const override {
    return llama_->build(seq_len, seed);
  }
  LayoutMap megatron_layout(const std::string& model_axis) const override {
    return llama_->megatron_layout(model_axis);
  }

 private:
  std::shared_ptr<const DecoderConfig> llama_;
};

std::shared_ptr<const DecoderConfig> phi3_decoder(const ConfigReader& reader) {
  return std::make_shared<Phi3Decoder>(phi3_config(reader));
}

class Phi3Family final : public ModelFamily {
 public:
  const char* name() const override { return "phi3"; }
  std::vector<std::string> model_types() const override { return {"phi3"}; }
  std::shared_ptr<const DecoderConfig> read_hf(const ConfigReader& reader) const override {
    return phi3_decoder(reader);
  }
  std::vector<std::string> keras_hub_backbones() const override { return {"Phi3Backbone"}; }
  nlohmann::json keras_hub_to_hf(const std::string&, keras_hub::Fields& f) const override {
    return keras_hub::phi3_hf_fields(f);
  }
  std::shared_ptr<const FamilyConfig> read_keras_hub(const ConfigReader& reader) const override {
    return phi3_decoder(reader);
  }
  // Registered before the Llama family, which would claim any Llama.
  std::shared_ptr<const FamilyConfig> config_of(const Model& model) const override {
    const auto* llama = dynamic_cast<const Llama*>(&model);
    if (!llama || llama->config().model_type != "phi3") return nullptr;
    return std::make_shared<Phi3Decoder>(llama->config());
  }
  void load_weights(Model& model, const std::string& path) const override {
    load_phi3_weights(dynamic_cast<Llama&>(model), path);
  }
  void save_hf(Model& model, const std::string& dir, const HfSaveOptions& options) const override {
    save_hf_phi3(dynamic_cast<Llama&>(model), dir, options);
  }
};

}  // namespace

const ModelFamily& phi3_family() {
  static const Phi3Family family;
  return family;
}

}  // namespace autoshard
