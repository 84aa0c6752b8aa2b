// OPT's KerasHub backbone (OPTBackbone): its variables and its config both
// ways. Followed: keras-hub's models/opt and utils/transformers/convert_opt.py.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/keras_hub_fields.h"
#include "autoshard/models/opt/formats.h"
#include "models/keras_hub_table.h"

namespace autoshard::keras_hub {

using nlohmann::json;

Variables opt_variables(const OPTConfig& c) {
  const int64_t C = c.hidden_size, H = c.num_attention_heads, D = c.head_dim(), F = c.ffn_dim;
  Table t;
  t.out.class_name = "OPTBackbone";
  t.out.task_class_name = "OPTCausalLM";
  const std::string e = "layers/token_and_position_embedding/";
  t.same("embed_tokens.embeddings", "embeddings/token_embedding/embeddings",
         e + "token_embedding/vars/0", {c.vocab_size, C});
  t.add("embed_positions.embeddings", "embeddings/position_embedding/embeddings",
        e + "position_embedding/vars/0", {c.max_position_embeddings, C},
        {c.max_position_embeddings, C}, {0, 1}, false, OPT::kPositionOffset);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("layers.", i, "."), path = cat("transformer_layer_", i, "/");
    const std::string g = "layers/" + numbered("transformer_decoder", i) + "/";
    t.layer_norm(ours + "self_attn_layer_norm", path + "self_attention_layer_norm",
                 g + "_self_attention_layer_norm", C);
    const std::string a = ours + "self_attn.";
    multi_head_attention(t, path + "self_attention", g + "_self_attention_layer", C, H, D,
                         {a + "q_proj", a + "k_proj", a + "v_proj", a + "out_proj",
                          /*heads_first=*/true, /*key_bias=*/true});
    t.layer_norm(ours + "final_layer_norm", path + "feedforward_layer_norm",
                 g + "_feedforward_layer_norm", C);
    feedforward(t, path, g, C, F, ours + "fc1", ours + "fc2", true);
  }
  t.layer_norm("final_layer_norm", "layer_norm", "layers/layer_normalization", C);
  return t.out;
}

json opt_hf_fields(Fields& f) {
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

json opt_backbone_config(const OPTConfig& c) {
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
}

}  // namespace autoshard::keras_hub
