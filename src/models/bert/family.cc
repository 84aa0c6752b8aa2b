// BERT and RoBERTa in the registry (autoshard/models/registry.h): encoders,
// read from KerasHub's BertBackbone and RobertaBackbone with their
// TextClassifier heads (the commands run decoders, so no model_type here;
// Hugging Face directories load through formats.h).
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/bert/formats.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/registry.h"

namespace autoshard {

namespace {

class BertEncoder final : public ConfigOf<BertConfig, EncoderConfig> {
 public:
  using ConfigOf::ConfigOf;
  std::string model_type() const override { return config_.model_type; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_sequence() const override {
    return config_.max_position_embeddings - config_.position_offset();
  }
  bool masked_lm() const override { return config_.masked_lm; }
  int64_t num_labels() const override { return config_.num_labels; }
  // KerasHub's BertMaskedLM and BertTextClassifier share BertBackbone;
  // RobertaBackbone's presets here are classifiers only.
  std::shared_ptr<const EncoderConfig> with_head(bool masked_lm,
                                                 int64_t num_labels) const override {
    BertConfig c = config_;
    if (masked_lm != c.masked_lm) {
      AS_CHECK(!c.roberta(), "a new ", masked_lm ? "masked-LM head" : "classification head",
               " is made for a KerasHub BertBackbone preset only");
      c.masked_lm = masked_lm;
      c.masked_lm_keeps_pooler = masked_lm;
      c.masked_lm_norm_eps = masked_lm ? keras_hub::keras_hub_masked_lm_epsilon : 0;
    }
    if (!masked_lm) c.num_labels = num_labels;
    return std::make_shared<BertEncoder>(c);
  }
  int64_t lora_rank() const override { return config_.lora.rank; }
  std::shared_ptr<const EncoderConfig> with_lora(const LoraOptions& lora) const override {
    BertConfig c = config_;
    c.lora = lora;
    return std::make_shared<BertEncoder>(c);
  }
  std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const override {
    return std::make_unique<Bert>(config_, seq_len, seed);
  }
  LayoutMap megatron_layout(const std::string& model_axis) const override {
    return bert_megatron_layout(model_axis);
  }
  const ModelFamily& family() const override { return bert_family(); }
  keras_hub::Variables keras_hub_variables() const override {
    return keras_hub::bert_variables(config_);
  }
  nlohmann::json keras_hub_backbone() const override {
    return keras_hub::bert_backbone_config(config_);
  }
  // The TextClassifier: its classes; logits, no dropout at inference.
  // BertMaskedLM's config has no fields beyond its backbone's.
  nlohmann::json keras_hub_task() const override {
    if (config_.masked_lm) return nlohmann::json::object();
    return {{"num_classes", config_.num_labels}, {"activation", nullptr}, {"dropout", 0.0}};
  }
};

class BertFamily final : public ModelFamily {
 public:
  const char* name() const override { return "bert"; }
  std::vector<std::string> keras_hub_backbones() const override {
    return {"BertBackbone", "RobertaBackbone"};
  }
  bool encoder() const override { return true; }
  std::shared_ptr<const EncoderConfig> read_hf_encoder(const std::string& dir) const override {
    return std::make_shared<BertEncoder>(bert_config_of(dir));
  }
  nlohmann::json keras_hub_to_hf(const std::string& backbone, keras_hub::Fields& f) const override {
    return keras_hub::bert_hf_fields(f, backbone == "RobertaBackbone");
  }
  // BertBackbone's tasks: BertTextClassifier and BertMaskedLM.
  bool keras_hub_task_matches(const std::string& backbone,
                              const std::string& task_class) const override {
    return ModelFamily::keras_hub_task_matches(backbone, task_class) ||
           (backbone == "BertBackbone" && task_class == "BertMaskedLM");
  }
  std::shared_ptr<const FamilyConfig> read_keras_hub(const ConfigReader& reader) const override {
    BertConfig c = BertConfig::from_reader(reader);
    if (c.masked_lm) {  // BertMaskedLM (keras_hub_model.cc's read_task)
      c.masked_lm_keeps_pooler = true;
      c.masked_lm_norm_eps = keras_hub::keras_hub_masked_lm_epsilon;
    }
    return std::make_shared<BertEncoder>(c);
  }
  std::shared_ptr<const FamilyConfig> config_of(const Model& model) const override {
    const auto* bert = dynamic_cast<const Bert*>(&model);
    return bert ? std::make_shared<BertEncoder>(bert->config()) : nullptr;
  }
  void load_weights(Model& model, const std::string& path) const override {
    load_bert_weights(dynamic_cast<Bert&>(model), path);
  }
  void save_hf(Model& model, const std::string& dir, const HfSaveOptions& options) const override {
    save_hf_bert(dynamic_cast<Bert&>(model), dir, options);
  }
};

}  // namespace

const ModelFamily& bert_family() {
  static const BertFamily family;
  return family;
}

}  // namespace autoshard
