// OPTConfig from Hugging Face config.json files, checked field by field.
#include <climits>
#include <cmath>

#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/opt/opt.h"

namespace autoshard {

OPTConfig OPTConfig::from_json_file(const std::string& path) {
  return from_reader(ConfigReader::from_file(path));
}

OPTConfig OPTConfig::from_reader(const ConfigReader& r) {
  AS_CHECK(r.model_type() == "opt", r.where("model_type"), " is '", r.model_type(),
           "', not \"opt\"");
  OPTConfig c;
  r.size("vocab_size", c.vocab_size, true);
  r.size("hidden_size", c.hidden_size, true);
  r.size("ffn_dim", c.ffn_dim, true);
  r.size("num_hidden_layers", c.num_hidden_layers, true);
  r.size("num_attention_heads", c.num_attention_heads, true);
  r.size("max_position_embeddings", c.max_position_embeddings, true);
  r.real("dropout", c.dropout, 0, 1, false);
  r.flag("tie_word_embeddings", c.tie_word_embeddings);
  // Fields whose other values would make another model than this code runs.
  const auto require = [&](const char* key, bool expected, const char* why) {
    bool value = expected;
    r.flag(key, value);
    AS_CHECK(value == expected, r.where(key), " = ", value ? "true" : "false",
             " is not supported (", why, ")");
  };
  require("do_layer_norm_before", true, "post-LayerNorm blocks, as OPT-350m's");
  require("enable_bias", true, "projections without biases");
  require("layer_norm_elementwise_affine", true, "LayerNorms without weights");
  require("_remove_final_layer_norm", false, "OPT-350m's missing final LayerNorm");
  int64_t projection = c.hidden_size;
  r.size("word_embed_proj_dim", projection, false);
  AS_CHECK(projection == c.hidden_size, r.where("word_embed_proj_dim"), " = ", projection,
           " is not supported (only hidden_size, ", c.hidden_size,
           "; OPT-350m's project_in/out are not)");
  std::string activation = "relu";
  r.text("activation_function", activation);
  AS_CHECK(activation == "relu", r.where("activation_function"), " = '", activation,
           "' is not supported (relu)");
  c.validate();
  return c;
}

void OPTConfig::validate() const {
  for (int64_t v : {vocab_size, hidden_size, ffn_dim, num_hidden_layers, num_attention_heads,
                    max_position_embeddings})
    AS_CHECK(v > 0 && v <= INT32_MAX - 2, "OPT config: sizes must be from 1 to 2147483645");
  AS_CHECK(hidden_size % num_attention_heads == 0, "OPT config: hidden_size (", hidden_size,
           ") must be a multiple of num_attention_heads (", num_attention_heads, ")");
  AS_CHECK(dropout >= 0 && dropout < 1, "OPT config: dropout must be in [0, 1)");
}

}  // namespace autoshard
