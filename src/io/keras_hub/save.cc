// Writes a model as a KerasHub preset: config.json (the backbone's
// KerasHub config, the inverse of config.cc), metadata.json,
// model.weights.h5 at the datasets of keras_hub.h, task.json and
// task.weights.h5 for a TextClassifier, and the tokenizer files of the
// preset it came from. The directory appears whole or not at all.
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "io/files.h"
#include "io/keras/hdf5_file.h"
#include "io/keras_hub/blocks.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json layer(const std::string& module, const std::string& cls, json config) {
  std::string snake;
  for (size_t i = 0; i < cls.size(); ++i) {
    const char c = cls[i];
    const bool upper = c >= 'A' && c <= 'Z';
    // Keras's to_snake_case: "_" before an upper-case letter that starts a word.
    if (upper && i > 0 &&
        ((cls[i - 1] >= 'a' && cls[i - 1] <= 'z') ||
         (i + 1 < cls.size() && cls[i + 1] >= 'a' && cls[i + 1] <= 'z' && cls[i - 1] != '_')))
      snake += '_';
    snake += upper ? static_cast<char>(c - 'A' + 'a') : c;
  }
  config["name"] = snake;
  config["trainable"] = true;
  config["dtype"] = "float32";
  return {{"module", module},
          {"class_name", cls},
          {"config", config},
          {"registered_name", "keras_hub>" + cls}};
}

// GemmaBackbone's Gemma 2 fields: both post norms, the soft caps, the query
// scale (head_dim, or hidden / heads) and the sliding window on the even
// layers (KerasHub's alternation) or on none.
void gemma2_fields(const LlamaConfig& c, json& j) {
  AS_CHECK(c.post_norms, "KerasHub preset: a gemma2 model without its post norms");
  const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : c.head_dim;
  AS_CHECK(scalar == double(c.head_dim) || scalar == double(c.hidden_size / c.num_attention_heads),
           "KerasHub preset: GemmaBackbone scales queries by head_dim or hidden / heads "
           "(query_head_dim_normalize); query_pre_attn_scalar is ",
           scalar);
  // Which layers slide: none, or exactly the even ones.
  std::vector<bool> slides(size_t(c.num_hidden_layers));
  bool sliding = false, alternating = true;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    slides[size_t(i)] = c.sliding_window > 0 &&
                        (c.layer_types.empty() || c.layer_types[size_t(i)] == "sliding_attention");
    sliding = sliding || slides[size_t(i)];
    alternating = alternating && slides[size_t(i)] == (i % 2 == 0);
  }
  AS_CHECK(!sliding || alternating,
           "KerasHub preset: GemmaBackbone slides its window on the even layers (or none)");
  j.update({{"query_head_dim_normalize", scalar == double(c.head_dim)},
            {"use_post_ffw_norm", true},
            {"use_post_attention_norm", true},
            {"final_logit_soft_cap",
             c.final_logit_softcapping > 0 ? json(c.final_logit_softcapping) : json(nullptr)},
            {"attention_logit_soft_cap",
             c.attn_logit_softcapping > 0 ? json(c.attn_logit_softcapping) : json(nullptr)},
            {"use_sliding_window_attention", sliding},
            {"sliding_window_size", c.sliding_window > 0 ? c.sliding_window : 4096}});
}

// The backbone's KerasHub config; what KerasHub cannot express is an error.
json backbone_config(const PresetConfig& config) {
  return std::visit(
      [](const auto& c) -> json {
        using C = std::decay_t<decltype(c)>;
        if constexpr (std::is_same_v<C, GPT2Config>) {
          return {{"vocabulary_size", c.vocab_size},
                  {"num_layers", c.n_layer},
                  {"num_heads", c.n_head},
                  {"hidden_dim", c.n_embd},
                  {"intermediate_dim", 4 * c.n_embd},
                  {"dropout", c.dropout},
                  {"max_sequence_length", c.n_positions}};
        } else if constexpr (std::is_same_v<C, OPTConfig>) {
          AS_CHECK(c.tie_word_embeddings,
                   "KerasHub preset: KerasHub's OPTBackbone ties its head to the embeddings; "
                   "this OPT has an lm_head of its own (save it as a Hugging Face directory)");
          return {{"vocabulary_size", c.vocab_size},
                  {"num_layers", c.num_hidden_layers},
                  {"num_heads", c.num_attention_heads},
                  {"hidden_dim", c.hidden_size},
                  {"intermediate_dim", c.ffn_dim},
                  {"dropout", c.dropout},
                  {"max_sequence_length", c.max_position_embeddings}};
        } else if constexpr (std::is_same_v<C, BertConfig>) {
          json j = {{"vocabulary_size", c.vocab_size},         {"num_layers", c.num_hidden_layers},
                    {"num_heads", c.num_attention_heads},      {"hidden_dim", c.hidden_size},
                    {"intermediate_dim", c.intermediate_size}, {"dropout", c.dropout}};
          if (c.roberta()) {
            AS_CHECK(c.type_vocab_size == 1 && c.pad_token_id == 1,
                     "KerasHub preset: RobertaBackbone has no token types and numbers positions "
                     "from 2 (type_vocab_size 1, pad_token_id 1)");
            j["max_sequence_length"] = c.max_position_embeddings - 2;
          } else {
            j["max_sequence_length"] = c.max_position_embeddings;
            j["num_segments"] = c.type_vocab_size;
          }
          return j;
        } else {
          const bool gemma = c.model_type == "gemma" || c.model_type == "gemma2";
          json j = {{"vocabulary_size", c.vocab_size},
                    {"num_layers", c.num_hidden_layers},
                    {"num_query_heads", c.num_attention_heads},
                    {"num_key_value_heads", c.num_key_value_heads},
                    {"hidden_dim", c.hidden_size},
                    {"layer_norm_epsilon", c.rms_norm_eps},
                    {"dropout", 0.0}};
          if (gemma) {
            j.update({{"intermediate_dim", 2 * c.intermediate_size}, {"head_dim", c.head_dim}});
            if (c.model_type == "gemma2") gemma2_fields(c, j);
            return j;
          }
          AS_CHECK(c.head_dim * c.num_attention_heads == c.hidden_size,
                   "KerasHub preset: KerasHub's ", c.model_type,
                   " backbone has head_dim = hidden / heads; this model's head_dim is ",
                   c.head_dim);
          j["intermediate_dim"] = c.intermediate_size;
          j["rope_max_wavelength"] = c.rope_theta;
          if (c.model_type == "llama") {
            j["tie_word_embeddings"] = c.tie_word_embeddings;
            if (c.rope_factor > 0)
              j.update(
                  {{"rope_frequency_adjustment_factor", c.rope_factor},
                   {"rope_low_freq_factor", c.rope_low_freq_factor},
                   {"rope_high_freq_factor", c.rope_high_freq_factor},
                   {"rope_pretraining_sequence_length", int64_t(c.rope_original_max_positions)}});
          } else if (c.model_type == "mistral") {
            AS_CHECK(!c.tie_word_embeddings, "KerasHub preset: MistralBackbone is untied");
            j["sliding_window"] = c.sliding_window > 0 ? c.sliding_window : 4096;
          } else {  // qwen2
            j["tie_word_embeddings"] = c.tie_word_embeddings;
            j["use_sliding_window_attention"] = c.sliding_window > 0;
            j["sliding_window_size"] = c.sliding_window > 0 ? c.sliding_window : 32768;
          }
          return j;
        }
      },
      config);
}

std::string family_of(const std::string& backbone) {
  std::string f = backbone.substr(0, backbone.size() - 8);  // less "Backbone"
  for (char& c : f) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return f;
}

void write_weights(Model& model, const Variables& v, const fs::path& dir, bool task) {
  const bool leader = World::process().leader();
  std::unique_ptr<keras::H5Writer> out;
  if (leader)
    out = std::make_unique<keras::H5Writer>(
        (dir / (task ? "task.weights.h5" : "model.weights.h5")).string());
  for (const Variable& var : v.variables) {
    if (var.task != task) continue;
    // gather_weight is collective under mpirun: every rank gathers.
    Tensor value = var.weight.empty() ? Tensor::zeros(var.keras_shape)
                                      : keras_value(var, model.gather_weight(var.weight));
    if (var.row_offset != 0 && !v.zero_weights.empty()) {
      // RoBERTa: the token-type row every token adds goes into the positions.
      const Tensor type = model.gather_weight(v.zero_weights.front());
      for (int64_t r = 0; r < value.dim(0); ++r)
        for (int64_t c = 0; c < value.dim(1); ++c)
          value.f32()[r * value.dim(1) + c] += type.f32()[c];
    }
    if (out) out->dataset(var.h5_path, value);
  }
  if (out) out->close();
}

// Copies the preset `from`'s tokenizer (tokenizer.json, preprocessor.json,
// assets/) into `out`, file by file, each checked to lie inside `from` after
// symbolic links: a link to a file elsewhere is refused, not copied out.
void copy_tokenizer(const fs::path& from, const fs::path& out) {
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "preprocessor.json"})
    if (fs::exists(fs::symlink_status(from / name, ec)))
      fs::copy_file(file_in_directory(from.string(), name, "KerasHub tokenizer file"), out / name);
  if (!fs::is_directory(from / "assets", ec)) return;
  directory_in_directory(from.string(), "assets", "KerasHub tokenizer assets");
  for (const auto& e : fs::recursive_directory_iterator(from / "assets")) {
    const fs::path rel = fs::relative(e.path(), from);
    if (e.is_directory() && !e.is_symlink())
      fs::create_directories(out / rel);
    else
      fs::copy_file(file_in_directory(from.string(), rel.string(), "KerasHub tokenizer asset"),
                    out / rel);
  }
}

}  // namespace

void save_preset(Model& model, const PresetConfig& config, const std::string& dir,
                 const std::string& tokenizer_from, bool overwrite) {
  const Variables v = variables_of(config);
  const json backbone = layer(cat("keras_hub.src.models.", family_of(v.class_name), ".",
                                  family_of(v.class_name), "_backbone"),
                              v.class_name, backbone_config(config));
  write_directory_atomically(
      dir,
      [&](const fs::path& out) {
        write_text((out / "config.json").string(), backbone.dump(2) + "\n");
        const json metadata = {{"keras_version", "3.8.0"},
                               {"keras_hub_version", "0.19.0"},
                               {"parameter_count", model.count_params()},
                               {"date_saved", "autoshard"}};
        write_text((out / "metadata.json").string(), metadata.dump(2) + "\n");
        json task_config = {{"backbone", backbone}, {"preprocessor", nullptr}};
        bool has_task = false;
        if (const auto* b = std::get_if<BertConfig>(&config)) {
          task_config.update(
              {{"num_classes", b->num_labels}, {"activation", nullptr}, {"dropout", 0.0}});
          has_task = true;
        }
        write_text(
            (out / "task.json").string(),
            layer("keras_hub.src.models." + family_of(v.class_name), v.task_class_name, task_config)
                    .dump(2) +
                "\n");
        write_weights(model, v, out, false);
        if (has_task) write_weights(model, v, out, true);
        // The tokenizer of the preset the model came from, unchanged.
        if (!tokenizer_from.empty() && World::process().leader())
          filesystem_step("copying the preset's tokenizer",
                          [&] { copy_tokenizer(fs::path(tokenizer_from), out); });
      },
      {.overwrite = overwrite,
       .read_names = {"model.weights.h5", "model.weights.json", "task.weights.h5"}});
}

}  // namespace autoshard::keras_hub
