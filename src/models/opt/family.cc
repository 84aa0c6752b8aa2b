// OPT in the registry (autoshard/models/registry.h): Hugging Face model_type
// opt and KerasHub's OPTBackbone.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/opt/formats.h"
#include "autoshard/models/registry.h"

namespace autoshard {

namespace {

class OptDecoder final : public ConfigOf<OPTConfig> {
 public:
  using ConfigOf::ConfigOf;
  const ModelFamily& family() const override { return opt_family(); }
  keras_hub::Variables keras_hub_variables() const override {
    return keras_hub::opt_variables(config_);
  }
  nlohmann::json keras_hub_backbone() const override {
    return keras_hub::opt_backbone_config(config_);
  }
  std::string model_type() const override { return "opt"; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  const char* max_positions_field() const override { return "max_position_embeddings"; }
  int64_t layers() const override { return config_.num_hidden_layers; }
  const char* layers_field() const override { return "num_hidden_layers"; }
  int64_t attention_width() const override { return config_.hidden_size; }
  std::vector<SizeTerm> size_terms() const override {
    const OPTConfig& c = config_;
    const double C = double(c.hidden_size), F = double(c.ffn_dim);
    // q, k, v, out and fc1, fc2 with biases; two LayerNorms.
    const double block = 4 * C * C + 2 * C * F + 9 * C + F;
    const int heads = c.tie_word_embeddings ? 1 : 2;
    return {
        {double(c.vocab_size) * C * heads,
         cat("vocab_size = ", c.vocab_size, " x hidden_size = ", c.hidden_size,
             heads == 2 ? " x 2 (embeddings and lm_head)" : "")},
        {double(c.max_position_embeddings + OPT::kPositionOffset) * C,
         cat("max_position_embeddings = ", c.max_position_embeddings,
             " x hidden_size = ", c.hidden_size)},
        {double(c.num_hidden_layers) * block,
         cat("num_hidden_layers = ", c.num_hidden_layers, " x ", block,
             " parameters a layer (hidden_size = ", c.hidden_size, ", ffn_dim = ", c.ffn_dim, ")")},
        {2 * C, "the final layer norm"}};
  }
  int64_t lora_rank() const override { return config_.lora.rank; }
  std::shared_ptr<const DecoderConfig> with_lora(const LoraOptions& lora) const override {
    OPTConfig c = config_;
    c.lora = lora;
    return std::make_shared<OptDecoder>(c);
  }
  std::shared_ptr<const DecoderConfig> with_layers(int64_t layers) const override {
    OPTConfig c = config_;
    c.num_hidden_layers = layers;
    return std::make_shared<OptDecoder>(c);
  }
  std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const override {
    return std::make_unique<OPT>(config_, seq_len, seed);
  }
  LayoutMap megatron_layout(const std::string& model_axis) const override {
    return opt_megatron_layout(config_, model_axis);
  }
};

}  // namespace

std::shared_ptr<const DecoderConfig> opt_decoder(OPTConfig config) {
  return std::make_shared<OptDecoder>(std::move(config));
}

namespace {

class OptFamily final : public ModelFamily {
 public:
  const char* name() const override { return "opt"; }
  std::vector<std::string> model_types() const override { return {"opt"}; }
  std::shared_ptr<const DecoderConfig> read_hf(const ConfigReader& reader) const override {
    return opt_decoder(OPTConfig::from_reader(reader));
  }
  std::vector<std::string> keras_hub_backbones() const override { return {"OPTBackbone"}; }
  nlohmann::json keras_hub_to_hf(const std::string&, keras_hub::Fields& f) const override {
    return keras_hub::opt_hf_fields(f);
  }
  std::shared_ptr<const FamilyConfig> read_keras_hub(const ConfigReader& reader) const override {
    return opt_decoder(OPTConfig::from_reader(reader));
  }
  std::shared_ptr<const FamilyConfig> config_of(const Model& model) const override {
    const auto* opt = dynamic_cast<const OPT*>(&model);
    return opt ? opt_decoder(opt->config()) : nullptr;
  }
  void load_weights(Model& model, const std::string& path) const override {
    load_opt_weights(dynamic_cast<OPT&>(model), path);
  }
  void save_hf(Model& model, const std::string& dir, const HfSaveOptions& options) const override {
    save_hf_opt(dynamic_cast<OPT&>(model), dir, options);
  }
};

}  // namespace

const ModelFamily& opt_family() {
  static const OptFamily family;
  return family;
}

}  // namespace autoshard
