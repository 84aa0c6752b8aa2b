// BertConfig from Hugging Face config.json files, checked field by field.
#include <climits>

#include "autoshard/error.h"
#include "autoshard/models/bert/bert.h"
#include "autoshard/models/config_reader.h"

namespace autoshard {

BertConfig BertConfig::from_json_file(const std::string& path) {
  return from_reader(ConfigReader::from_file(path));
}

BertConfig BertConfig::from_reader(const ConfigReader& r) {
  BertConfig c;
  c.model_type = r.model_type();
  AS_CHECK(c.model_type == "bert" || c.model_type == "roberta", r.where("model_type"), " is '",
           c.model_type, "', not \"bert\" or \"roberta\"");
  r.size("vocab_size", c.vocab_size, true);
  r.size("hidden_size", c.hidden_size, true);
  r.size("intermediate_size", c.intermediate_size, true);
  r.size("num_hidden_layers", c.num_hidden_layers, true);
  r.size("num_attention_heads", c.num_attention_heads, true);
  r.size("max_position_embeddings", c.max_position_embeddings, true);
  r.size("type_vocab_size", c.type_vocab_size, false);
  r.real("layer_norm_eps", c.layer_norm_eps, 0, 1, true);
  r.real("hidden_dropout_prob", c.dropout, 0, 1, false);
  if (c.roberta()) c.pad_token_id = 1;
  if (r.has("pad_token_id")) {
    const auto& p = r.json()["pad_token_id"];
    AS_CHECK(p.is_number_integer() && p.get<int64_t>() >= 0, r.where("pad_token_id"),
             " must be a token id");
    c.pad_token_id = p.get<int64_t>();
  }
  if (r.has("id2label")) {
    AS_CHECK(r.json()["id2label"].is_object() && !r.json()["id2label"].empty(), r.where("id2label"),
             " must be an object of labels");
    c.num_labels = static_cast<int64_t>(r.json()["id2label"].size());
  }
  r.size("num_labels", c.num_labels, false);
  if (r.has("architectures") && r.json()["architectures"].is_array())
    for (const auto& a : r.json()["architectures"])
      c.masked_lm |= a.is_string() && a.get<std::string>().ends_with("ForMaskedLM");
  // Fields whose other values would make another model than this code runs.
  std::string act = "gelu", positions = "absolute";
  r.text("hidden_act", act);
  AS_CHECK(act == "gelu", r.where("hidden_act"), " = '", act,
           "' is not supported (BERT's erf GELU: gelu)");
  r.text("position_embedding_type", positions);
  AS_CHECK(positions == "absolute", r.where("position_embedding_type"), " = '", positions,
           "' is not supported (absolute)");
  bool decoder = false;
  r.flag("is_decoder", decoder);
  AS_CHECK(!decoder, r.where("is_decoder"), " = true is not supported (an encoder)");
  c.validate();
  return c;
}

void BertConfig::validate() const {
  for (int64_t v : {vocab_size, hidden_size, intermediate_size, num_hidden_layers,
                    num_attention_heads, max_position_embeddings, type_vocab_size, num_labels})
    AS_CHECK(v > 0 && v <= INT32_MAX, "BERT config: sizes must be from 1 to 2147483647");
  AS_CHECK(hidden_size % num_attention_heads == 0, "BERT config: hidden_size (", hidden_size,
           ") must be a multiple of num_attention_heads (", num_attention_heads, ")");
  AS_CHECK(position_offset() < max_position_embeddings, "BERT config: pad_token_id ", pad_token_id,
           " leaves no positions of ", max_position_embeddings);
  AS_CHECK(dropout >= 0 && dropout < 1, "BERT config: dropout must be in [0, 1)");
}

}  // namespace autoshard
