#include "autoshard/models/bert/formats.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "io/files.h"
#include "io/hf_tensors.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

std::vector<HfTensor> hf_tensors(const BertConfig& c) {
  const int64_t C = c.hidden_size, I = c.intermediate_size, L = c.num_labels;
  const std::string base = c.model_type + ".";
  std::vector<HfTensor> t;
  // A module's weight and bias: LayerNorm's gamma and beta, a dense layer's
  // kernel and bias, under `ours` here and base + `ours` in the file.
  auto add = [&](const std::string& ours, bool norm, Shape weight, Shape bias,
                 const std::string& prefix) {
    t.push_back({ours + (norm ? ".gamma" : ".kernel"), {prefix + ours + ".weight", weight}});
    t.push_back({ours + (norm ? ".beta" : ".bias"), {prefix + ours + ".bias", bias}});
  };
  for (auto [name, rows] : {std::pair{"word_embeddings", c.vocab_size},
                            std::pair{"position_embeddings", c.max_position_embeddings},
                            std::pair{"token_type_embeddings", c.type_vocab_size}})
    t.push_back({cat("embeddings.", name, ".embeddings"),
                 {cat(base, "embeddings.", name, ".weight"), {rows, C}}});
  add("embeddings.LayerNorm", true, {C}, {C}, base);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string l = cat("encoder.layer.", i, ".");
    for (const char* p : {"query", "key", "value"})
      add(l + "attention.self." + p, false, {C, C}, {C}, base);
    add(l + "attention.output.dense", false, {C, C}, {C}, base);
    add(l + "attention.output.LayerNorm", true, {C}, {C}, base);
    add(l + "intermediate.dense", false, {I, C}, {I}, base);
    add(l + "output.dense", false, {C, I}, {C}, base);
    add(l + "output.LayerNorm", true, {C}, {C}, base);
  }
  if (c.masked_lm) {
    const std::string head = c.roberta() ? "lm_head." : "cls.predictions.";
    const std::string transform = c.roberta() ? head : head + "transform.";
    add(transform + "dense", false, {C, C}, {C}, "");
    add(transform + (c.roberta() ? "layer_norm" : "LayerNorm"), true, {C}, {C}, "");
    t.push_back({head + "bias", {head + "bias", {c.vocab_size}}});
  } else if (c.roberta()) {
    add("classifier.dense", false, {C, C}, {C}, "");
    add("classifier.out_proj", false, {L, C}, {L}, "");
  } else {
    add("pooler.dense", false, {C, C}, {C}, base);
    add("classifier", false, {L, C}, {L}, "");
  }
  return t;
}

void write_hf_bert(Bert& model, const fs::path& dir, const HfSaveOptions& options) {
  const BertConfig& c = model.config();
  AS_CHECK(!c.masked_lm || c.masked_lm_epsilon() == c.layer_norm_eps,
           "save: a Hugging Face masked LM's head normalises with layer_norm_eps (",
           c.layer_norm_eps, "), and this one (KerasHub's BertMaskedLM) with ",
           c.masked_lm_epsilon(), "; save it as a KerasHub preset (save_to_preset)");
  write_hf_reshaped(model, dir, hf_tensors(c), options);
  const nlohmann::json cfg = {{"model_type", c.model_type},
                              {"architectures",
                               {cat(c.roberta() ? "Roberta" : "Bert",
                                    c.masked_lm ? "ForMaskedLM" : "ForSequenceClassification")}},
                              {"vocab_size", c.vocab_size},
                              {"hidden_size", c.hidden_size},
                              {"intermediate_size", c.intermediate_size},
                              {"num_hidden_layers", c.num_hidden_layers},
                              {"num_attention_heads", c.num_attention_heads},
                              {"max_position_embeddings", c.max_position_embeddings},
                              {"type_vocab_size", c.type_vocab_size},
                              {"layer_norm_eps", c.layer_norm_eps},
                              {"hidden_dropout_prob", c.dropout},
                              {"pad_token_id", c.pad_token_id},
                              {"num_labels", c.num_labels},
                              {"hidden_act", "gelu"},
                              {"position_embedding_type", "absolute"},
                              {"torch_dtype", options.torch_dtype()}};
  write_text((dir / "config.json").string(), cfg.dump(2) + "\n");
}

}  // namespace

BertConfig bert_config_of(const std::string& dir) {
  return BertConfig::from_json_file(file_in_directory(dir, "config.json", "model config"));
}

std::map<std::string, std::string> bert_hf_names(const BertConfig& config) {
  return hf_names(hf_tensors(config));
}

void load_bert_weights(Bert& model, const std::string& path) {
  // Checkpoints often keep the position ids buffer (it follows from the
  // config), the masked-LM decoder's copy of the word embeddings and of the
  // bias (tied), and a pooler the masked-LM head does not use.
  const bool masked_lm = model.config().masked_lm;
  load_hf_reshaped(model, path, hf_tensors(model.config()), [masked_lm](const std::string& name) {
    return name.ends_with("embeddings.position_ids") ||
           (masked_lm && (name.find(".decoder.") != std::string::npos ||
                          name.find("pooler.") != std::string::npos));
  });
}

void save_hf_bert(Bert& model, const std::string& dir, const HfSaveOptions& options) {
  write_directory_atomically(dir, [&](const fs::path& out) { write_hf_bert(model, out, options); },
                             {.overwrite = options.overwrite, .read_names = hf_weight_files()});
}

}  // namespace autoshard
