// GPT-2 in the registry (autoshard/models/registry.h): Hugging Face configs
// without a model_type or with "gpt2", the preset names ("gpt2-medium"),
// llm.c's .bin files and KerasHub's GPT2Backbone.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/gpt2/formats.h"
#include "autoshard/models/registry.h"

namespace autoshard {

namespace {

class Gpt2Decoder final : public ConfigOf<GPT2Config> {
 public:
  using ConfigOf::ConfigOf;
  const ModelFamily& family() const override { return gpt2_family(); }
  keras_hub::Variables keras_hub_variables() const override {
    return keras_hub::gpt2_variables(config_);
  }
  nlohmann::json keras_hub_backbone() const override {
    return keras_hub::gpt2_backbone_config(config_);
  }
  std::string model_type() const override { return "gpt2"; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.n_positions; }
  const char* max_positions_field() const override { return "n_positions"; }
  int64_t layers() const override { return config_.n_layer; }
  const char* layers_field() const override { return "n_layer"; }
  int64_t attention_width() const override { return config_.n_embd; }
  std::vector<SizeTerm> size_terms() const override {
    const GPT2Config& c = config_;
    const double C = double(c.n_embd);
    return {
        {double(c.vocab_size) * C, cat("vocab_size = ", c.vocab_size, " x n_embd = ", c.n_embd)},
        {double(c.n_positions) * C, cat("n_positions = ", c.n_positions, " x n_embd = ", c.n_embd)},
        {double(c.n_layer) * 12 * C * C,
         cat("n_layer = ", c.n_layer, " x 12 n_embd^2 (n_embd = ", c.n_embd, ")")}};
  }
  int64_t lora_rank() const override { return config_.lora.rank; }
  std::shared_ptr<const DecoderConfig> with_lora(const LoraOptions& lora) const override {
    GPT2Config c = config_;
    c.lora = lora;
    return std::make_shared<Gpt2Decoder>(c);
  }
  std::shared_ptr<const DecoderConfig> with_layers(int64_t layers) const override {
    GPT2Config c = config_;
    c.n_layer = layers;
    return std::make_shared<Gpt2Decoder>(c);
  }
  std::unique_ptr<Model> build(int64_t seq_len, uint64_t seed) const override {
    return std::make_unique<GPT2>(config_, seq_len, seed);
  }
  LayoutMap megatron_layout(const std::string& model_axis) const override {
    return gpt2_megatron_layout(model_axis);
  }
  // llm.c's .bin: the whole model, its positions all.
  void convert_to_file(const std::string& in, const std::string& out) const override {
    GPT2 model(config_, config_.n_positions);
    load_gpt2_weights(model, in);
    save_llmc_gpt2(model, out);
  }
};

}  // namespace

std::shared_ptr<const DecoderConfig> gpt2_decoder(GPT2Config config) {
  return std::make_shared<Gpt2Decoder>(std::move(config));
}

namespace {

class Gpt2Family final : public ModelFamily {
 public:
  const char* name() const override { return "gpt2"; }
  std::vector<std::string> model_types() const override { return {"", "gpt2"}; }
  std::shared_ptr<const DecoderConfig> read_hf(const ConfigReader& reader) const override {
    return gpt2_decoder(GPT2Config::from_reader(reader));
  }
  std::shared_ptr<const DecoderConfig> named(const std::string& name) const override {
    return gpt2_decoder(GPT2Config::preset(name));
  }
  std::shared_ptr<const DecoderConfig> read_file(const std::string& path) const override {
    return path.ends_with(".bin") ? gpt2_decoder(gpt2_config_of(path)) : nullptr;
  }
  std::vector<std::string> keras_hub_backbones() const override { return {"GPT2Backbone"}; }
  nlohmann::json keras_hub_to_hf(const std::string&, keras_hub::Fields& f) const override {
    return keras_hub::gpt2_hf_fields(f);
  }
  std::shared_ptr<const FamilyConfig> read_keras_hub(const ConfigReader& reader) const override {
    return gpt2_decoder(GPT2Config::from_reader(reader));
  }
  std::shared_ptr<const FamilyConfig> config_of(const Model& model) const override {
    const auto* gpt2 = dynamic_cast<const GPT2*>(&model);
    return gpt2 ? gpt2_decoder(gpt2->config()) : nullptr;
  }
  void load_weights(Model& model, const std::string& path) const override {
    load_gpt2_weights(dynamic_cast<GPT2&>(model), path);
  }
  void save_hf(Model& model, const std::string& dir, const HfSaveOptions& options) const override {
    AS_CHECK(options.dtype == "F32" && options.max_shard_bytes == 0,
             "GPT-2 directories are written as F32 in one model.safetensors (no --dtype, no "
             "--max-shard-size)");
    save_hf_gpt2(dynamic_cast<GPT2&>(model), dir, options.overwrite);
  }
};

}  // namespace

const ModelFamily& gpt2_family() {
  static const Gpt2Family family;
  return family;
}

}  // namespace autoshard
