// A KerasHub preset's config.json (and task.json) as autoshard's config. The
// backbone's fields are rewritten as the Hugging Face config the same model
// has (following keras-hub's convert_<family>.py in reverse) and read by the
// existing readers, so both ways in share their checks; a KerasHub field
// autoshard does not run or does not know is an error naming it.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/json.h"
#include "nn/models/config_reader.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// KerasHub gives no position limit for rotary models; long enough for the
// presets' contexts, and only a bound on sequence lengths here.
constexpr int64_t kRotaryPositions = 8192;

json read_json(const fs::path& path, const std::string& what) {
  const std::string text = read_input_file(path.string(), what, 64 << 20);
  return parse_json_text(text, what + " '" + path.string() + "'");
}

// The fields of one KerasHub config object: each read once, with its type
// checked; those left unread at the end are errors.
class Fields {
 public:
  Fields(json j, std::string where, std::string owner)
      : j_(std::move(j)), where_(std::move(where)), owner_(std::move(owner)) {
    AS_CHECK(j_.is_object(), where_, ": \"config\" must be an object");
  }
  bool has(const char* key) {
    used_.insert(key);
    return j_.contains(key) && !j_[key].is_null();
  }
  int64_t size(const char* key, std::optional<int64_t> fallback = {}) {
    if (!has(key)) {
      AS_CHECK(fallback, where_, ": \"", key, "\" is missing (", owner_, " needs it)");
      return *fallback;
    }
    const json& v = j_[key];
    AS_CHECK(
        v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() < (int64_t(1) << 31),
        where_, ": \"", key, "\" must be a whole number from 1 to 2^31 - 1, not ", v.dump());
    return v.get<int64_t>();
  }
  double real(const char* key, double fallback) {
    if (!has(key)) return fallback;
    const json& v = j_[key];
    AS_CHECK(v.is_number(), where_, ": \"", key, "\" must be a number, not ", v.dump());
    return v.get<double>();
  }
  std::optional<double> maybe_real(const char* key) {
    if (!has(key)) return std::nullopt;
    return real(key, 0);
  }
  bool flag(const char* key, bool fallback) {
    if (!has(key)) return fallback;
    AS_CHECK(j_[key].is_boolean(), where_, ": \"", key, "\" must be true or false, not ",
             j_[key].dump());
    return j_[key].get<bool>();
  }
  // A field whose only value autoshard runs is `runs` (a number).
  void only(const char* key, double runs, const std::string& why) {
    const double v = real(key, runs);
    AS_CHECK(v == runs, where_, ": \"", key, "\" = ", v, " is not supported: ", why);
  }
  void ignore(const char* key) { used_.insert(key); }
  [[noreturn]] void bad(const char* key, const std::string& why) const {
    fail(where_, ": \"", key, "\" ", why);
  }
  // Every field was read.
  void done() const {
    for (const auto& [key, value] : j_.items())
      AS_CHECK(used_.count(key), where_, ": \"", key, "\" is not supported by autoshard's ", owner_,
               " (its fields: see docs/keras-hub.md); remove it or use a Hugging Face "
               "directory");
  }
  const std::string& where() const { return where_; }

 private:
  json j_;
  std::string where_, owner_;
  std::set<std::string> used_;
};

// Fields every Keras layer config has, which change nothing here.
void ignore_layer_fields(Fields& f) {
  for (const char* k : {"name", "trainable", "dtype"}) f.ignore(k);
}

json gpt2_hf(Fields& f) {
  const int64_t C = f.size("hidden_dim");
  json hf = {{"vocab_size", f.size("vocabulary_size")},
             {"n_layer", f.size("num_layers")},
             {"n_head", f.size("num_heads")},
             {"n_embd", C},
             {"n_positions", f.size("max_sequence_length", 1024)},
             {"resid_pdrop", f.real("dropout", 0.1)},
             {"layer_norm_epsilon", 1e-5}};
  if (f.size("intermediate_dim") != 4 * C)
    f.bad("intermediate_dim", cat("must be 4 x hidden_dim = ", 4 * C, " (autoshard's GPT-2)"));
  return hf;
}

json opt_hf(Fields& f) {
  const int64_t C = f.size("hidden_dim");
  return {{"model_type", "opt"},
          {"vocab_size", f.size("vocabulary_size")},
          {"num_hidden_layers", f.size("num_layers")},
          {"num_attention_heads", f.size("num_heads")},
          {"hidden_size", C},
          {"word_embed_proj_dim", C},
          {"ffn_dim", f.size("intermediate_dim")},
          {"max_position_embeddings", f.size("max_sequence_length", 2048)},
          {"dropout", f.real("dropout", 0.1)},
          {"do_layer_norm_before", true},
          {"activation_function", "relu"},
          {"enable_bias", true},
          {"tie_word_embeddings", true}};
}

json bert_hf(Fields& f, bool roberta) {
  json hf = {{"model_type", roberta ? "roberta" : "bert"},
             {"vocab_size", f.size("vocabulary_size")},
             {"num_hidden_layers", f.size("num_layers")},
             {"num_attention_heads", f.size("num_heads")},
             {"hidden_size", f.size("hidden_dim")},
             {"intermediate_size", f.size("intermediate_dim")},
             {"hidden_dropout_prob", f.real("dropout", 0.1)},
             {"hidden_act", "gelu"},
             {"position_embedding_type", "absolute"}};
  const int64_t positions = f.size("max_sequence_length", 512);
  if (roberta) {
    // Hugging Face's RoBERTa numbers positions from pad_token_id + 1 = 2.
    hf.update({{"max_position_embeddings", positions + 2},
               {"type_vocab_size", 1},
               {"pad_token_id", 1},
               {"layer_norm_eps", 1e-5}});
  } else {
    hf.update({{"max_position_embeddings", positions},
               {"type_vocab_size", f.size("num_segments", 2)},
               {"pad_token_id", 0},
               {"layer_norm_eps", 1e-12}});
  }
  return hf;
}

// The rotary and size fields Llama, Mistral and Qwen share.
json decoder_hf(Fields& f, const char* model_type) {
  const int64_t C = f.size("hidden_dim"), H = f.size("num_query_heads");
  for (const char* k : {"rope_position_scaling_factor", "rope_scaling_factor"})
    f.only(k, 1.0, "autoshard's rotary embeddings have no linear position scaling");
  f.only("dropout", 0.0, "autoshard's Llama family has no dropout");
  return {{"model_type", model_type},
          {"vocab_size", f.size("vocabulary_size")},
          {"num_hidden_layers", f.size("num_layers")},
          {"num_attention_heads", H},
          {"num_key_value_heads", f.size("num_key_value_heads")},
          {"hidden_size", C},
          {"head_dim", C / H},
          {"intermediate_size", f.size("intermediate_dim")},
          {"rope_theta", f.real("rope_max_wavelength", 10000)},
          {"rms_norm_eps", f.real("layer_norm_epsilon", 1e-6)},
          {"max_position_embeddings", kRotaryPositions},
          {"hidden_act", "silu"}};
}

json llama_hf(Fields& f) {
  json hf = decoder_hf(f, "llama");
  hf["rms_norm_eps"] = f.real("layer_norm_epsilon", 1e-6);
  hf["tie_word_embeddings"] = f.flag("tie_word_embeddings", false);
  // Llama 3.1's frequency adjustment is Hugging Face's llama3 rope_scaling.
  if (const auto factor = f.maybe_real("rope_frequency_adjustment_factor")) {
    hf["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", *factor},
        {"low_freq_factor", f.real("rope_low_freq_factor", 1)},
        {"high_freq_factor", f.real("rope_high_freq_factor", 4)},
        {"original_max_position_embeddings", f.size("rope_pretraining_sequence_length", 8192)}};
  } else {
    for (const char* k :
         {"rope_low_freq_factor", "rope_high_freq_factor", "rope_pretraining_sequence_length"})
      if (f.has(k)) f.bad(k, "needs rope_frequency_adjustment_factor (Llama 3.1's rope scaling)");
  }
  return hf;
}

json mistral_hf(Fields& f) {
  json hf = decoder_hf(f, "mistral");
  hf["sliding_window"] = f.size("sliding_window", 512);
  hf["tie_word_embeddings"] = false;
  return hf;
}

json qwen_hf(Fields& f) {
  json hf = decoder_hf(f, "qwen2");
  hf["tie_word_embeddings"] = f.flag("tie_word_embeddings", true);
  hf["attention_bias"] = true;
  hf["use_sliding_window"] = f.flag("use_sliding_window_attention", false);
  hf["sliding_window"] = f.size("sliding_window_size", 32768);
  return hf;
}

json gemma_hf(Fields& f) {
  const int64_t C = f.size("hidden_dim"), H = f.size("num_query_heads"), D = f.size("head_dim");
  const int64_t I2 = f.size("intermediate_dim");
  if (I2 % 2 != 0) f.bad("intermediate_dim", "must be even (twice the gate's width)");
  f.only("dropout", 0.0, "autoshard's Gemma has no dropout");
  json hf = {{"vocab_size", f.size("vocabulary_size")},
             {"num_hidden_layers", f.size("num_layers")},
             {"num_attention_heads", H},
             {"num_key_value_heads", f.size("num_key_value_heads")},
             {"hidden_size", C},
             {"head_dim", D},
             {"intermediate_size", I2 / 2},
             {"rms_norm_eps", f.real("layer_norm_epsilon", 1e-6)},
             {"rope_theta", 10000.0},
             {"max_position_embeddings", kRotaryPositions},
             {"hidden_activation", "gelu_pytorch_tanh"},
             {"tie_word_embeddings", true}};
  const bool post_ffw = f.flag("use_post_ffw_norm", false);
  const bool post_attn = f.flag("use_post_attention_norm", false);
  const auto final_cap = f.maybe_real("final_logit_soft_cap");
  const auto attn_cap = f.maybe_real("attention_logit_soft_cap");
  const bool sliding = f.flag("use_sliding_window_attention", false);
  const int64_t window = f.size("sliding_window_size", 4096);
  const bool normalize = f.flag("query_head_dim_normalize", true);
  if (!post_ffw && !post_attn && !final_cap && !attn_cap && !sliding && normalize) {
    hf["model_type"] = "gemma";
    return hf;
  }
  // Gemma 2: both post norms, soft caps, sliding window on the even layers.
  if (post_ffw != post_attn)
    f.bad(post_ffw ? "use_post_attention_norm" : "use_post_ffw_norm",
          "must equal the other post norm flag (autoshard's Gemma 2 has both or neither)");
  AS_CHECK(post_ffw, f.where(),
           ": Gemma 2's fields (soft caps, sliding window, query_head_dim_normalize false) need "
           "use_post_ffw_norm and use_post_attention_norm true");
  hf["model_type"] = "gemma2";
  hf["query_pre_attn_scalar"] = normalize ? D : C / H;
  hf["attn_logit_softcapping"] = attn_cap ? json(*attn_cap) : json(nullptr);
  hf["final_logit_softcapping"] = final_cap ? json(*final_cap) : json(nullptr);
  hf["sliding_window"] = window;
  if (!sliding)
    hf["layer_types"] =
        std::vector<std::string>(hf["num_hidden_layers"].get<size_t>(), "full_attention");
  return hf;
}

// The task's class for a backbone: its CausalLM, or (BERT, RoBERTa) its
// TextClassifier, whose num_classes sets the labels.
void read_task(const fs::path& dir, const std::string& backbone, json& hf) {
  const std::string family = backbone.substr(0, backbone.size() - std::string("Backbone").size());
  const bool encoder = family == "Bert" || family == "Roberta";
  const fs::path path = dir / "task.json";
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) {
    AS_CHECK(!encoder, "KerasHub preset '", dir.string(), "' has no task.json: a ", backbone,
             " runs here with its TextClassifier head (task.json with num_classes and "
             "task.weights.h5)");
    return;
  }
  const json task = read_json(file_in_directory(dir.string(), "task.json", "KerasHub task.json"),
                              "KerasHub task.json");
  const std::string where = cat("KerasHub preset '", path.string(), "'");
  AS_CHECK(task.is_object() && task.contains("class_name") && task["class_name"].is_string(), where,
           ": \"class_name\" is missing");
  const std::string cls = task["class_name"].get<std::string>();
  const std::string want = family + (encoder ? "TextClassifier" : "CausalLM");
  AS_CHECK(cls == want || (family == "Llama3" && cls == "LlamaCausalLM"), where,
           ": \"class_name\" is '", cls, "'; autoshard runs ", want, " on a ", backbone);
  Fields f(task.value("config", json::object()), where + " \"config\"", cls);
  ignore_layer_fields(f);
  for (const char* k : {"backbone", "preprocessor", "compile_config"}) f.ignore(k);
  if (encoder) {
    hf["num_labels"] = f.size("num_classes");
    hf["architectures"] = {family + "ForSequenceClassification"};
    f.real("dropout", 0);  // off in inference; autoshard's classifier dropout follows the backbone
    f.ignore("hidden_dim");
    if (f.has("activation") && task["config"]["activation"] != "linear")
      f.bad("activation", "must be null or \"linear\" (the head gives logits)");
  } else {
    f.ignore("sampler");
  }
  f.done();
}

}  // namespace

bool is_preset(const std::string& dir) {
  const fs::path config = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(config, ec)) return false;
  // A KerasHub config.json names its class and module; a Hugging Face one
  // has model_type, an unzipped .keras file a model's class.
  try {
    const json j = read_json(file_in_directory(dir, "config.json", "config.json"), "config.json");
    if (!j.is_object() || !j.contains("class_name") || !j["class_name"].is_string() ||
        !j.contains("config"))
      return false;
    return json_string_or(j, "module", "", "config.json").starts_with("keras_hub") ||
           j["class_name"].get<std::string>().ends_with("Backbone");
  } catch (const Error&) {
    return false;
  }
}

namespace {

PresetConfig read_preset_config(const std::string& dir) {
  const fs::path path = file_in_directory(dir, "config.json", "KerasHub config.json");
  const json j = read_json(path, "KerasHub config.json");
  const std::string where = cat("KerasHub preset '", path.string(), "'");
  AS_CHECK(j.is_object() && j.contains("class_name") && j["class_name"].is_string(), where,
           ": \"class_name\" is missing (a KerasHub config.json names the backbone class)");
  const std::string cls = j["class_name"].get<std::string>();
  AS_CHECK(j.contains("config"), where, ": \"config\" is missing");
  Fields f(j["config"], where + " \"config\"", cls);
  ignore_layer_fields(f);
  json hf;
  if (cls == "GPT2Backbone")
    hf = gpt2_hf(f);
  else if (cls == "OPTBackbone")
    hf = opt_hf(f);
  else if (cls == "BertBackbone")
    hf = bert_hf(f, false);
  else if (cls == "RobertaBackbone")
    hf = bert_hf(f, true);
  else if (cls == "LlamaBackbone" || cls == "Llama3Backbone")
    hf = llama_hf(f);
  else if (cls == "MistralBackbone")
    hf = mistral_hf(f);
  else if (cls == "QwenBackbone")
    hf = qwen_hf(f);
  else if (cls == "GemmaBackbone")
    hf = gemma_hf(f);
  else
    fail(where, ": \"class_name\" is '", cls,
         "', which autoshard has no architecture for (GPT2Backbone, BertBackbone, "
         "RobertaBackbone, OPTBackbone, LlamaBackbone, MistralBackbone, QwenBackbone, "
         "GemmaBackbone)");
  f.done();
  read_task(fs::path(dir), cls, hf);
  const ConfigReader reader(hf.dump(), path.string() + " (as Hugging Face fields)");
  if (cls == "GPT2Backbone") return GPT2Config::from_reader(reader);
  if (cls == "OPTBackbone") return OPTConfig::from_reader(reader);
  if (cls == "BertBackbone" || cls == "RobertaBackbone") return BertConfig::from_reader(reader);
  return LlamaConfig::from_reader(reader);
}

}  // namespace

PresetConfig preset_config(const std::string& dir) {
  // The backstop for a JSON value read unchecked: one error naming the preset.
  return with_json_errors(cat("KerasHub preset '", dir, "'"),
                          [&] { return read_preset_config(dir); });
}

}  // namespace autoshard::keras_hub
