// GPT-2's KerasHub backbone (GPT2Backbone): its variables and its config both
// ways. Followed: keras-hub's models/gpt2 and utils/transformers/convert_gpt2.py.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/formats.h"
#include "autoshard/models/keras_hub_fields.h"
#include "models/keras_hub_table.h"

namespace autoshard::keras_hub {

using nlohmann::json;

Variables gpt2_variables(const GPT2Config& c) {
  const int64_t C = c.n_embd, H = c.n_head, D = c.head_dim(), I = 4 * C;
  Table t;
  t.out.class_name = "GPT2Backbone";
  t.out.task_class_name = "GPT2CausalLM";
  t.same("wte.embeddings", "token_embedding/embeddings", "layers/reversible_embedding/vars/0",
         {c.vocab_size, C});
  t.same("wpe.embeddings", "position_embedding/embeddings", "layers/position_embedding/vars/0",
         {c.n_positions, C});
  for (int64_t b = 0; b < c.n_layer; ++b) {
    const std::string ours = cat("h.", b, "."), path = cat("transformer_layer_", b, "/");
    const std::string g = "layers/" + numbered("transformer_decoder", b) + "/";
    t.layer_norm(ours + "ln_1", path + "self_attention_layer_norm",
                 g + "_self_attention_layer_norm", C);
    const std::string a = ours + "attn.";
    multi_head_attention(t, path + "self_attention", g + "_self_attention_layer", C, H, D,
                         {a + "query", a + "key", a + "value", a + "attention_output",
                          /*heads_first=*/false, /*key_bias=*/false});
    t.layer_norm(ours + "ln_2", path + "feedforward_layer_norm", g + "_feedforward_layer_norm", C);
    feedforward(t, path, g, C, I, ours + "mlp.c_fc", ours + "mlp.c_proj", false);
  }
  t.layer_norm("ln_f", "layer_norm", "layers/layer_normalization", C);
  return t.out;
}

json gpt2_hf_fields(Fields& f) {
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

json gpt2_backbone_config(const GPT2Config& c) {
  return {{"vocabulary_size", c.vocab_size},
          {"num_layers", c.n_layer},
          {"num_heads", c.n_head},
          {"hidden_dim", c.n_embd},
          {"intermediate_dim", 4 * c.n_embd},
          {"dropout", c.dropout},
          {"max_sequence_length", c.n_positions}};
}

}  // namespace autoshard::keras_hub
