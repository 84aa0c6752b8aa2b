// KerasHub's Phi3Backbone (keras-hub's models/phi3/: phi3_backbone.py,
// phi3_decoder.py, phi3_attention.py, phi3_layernorm.py): its variables and
// its config both ways. A Keras variable's path follows the layers' names
// (transformer_layer_N/attention/query/kernel); its place in
// model.weights.h5 follows Keras 3's saving_lib: the functional model's
// layers by class (phi3_decoder, phi3_decoder_1, ...), then the layers'
// attributes (attention/query_dense).
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/keras_hub_fields.h"
#include "autoshard/models/phi3/phi3.h"
#include "models/keras_hub_table.h"

namespace autoshard::keras_hub {

using nlohmann::json;

Variables phi3_variables(const LlamaConfig& c) {
  const int64_t C = c.hidden_size, K = c.num_key_value_heads, G = c.group(), D = c.head_dim;
  const int64_t H = c.num_attention_heads, I = c.intermediate_size, V = c.vocab_size;
  Table t;
  t.out.class_name = "Phi3Backbone";
  t.out.task_class_name = "Phi3CausalLM";
  t.same("embed_tokens.embeddings", "token_embedding/embeddings",
         "layers/reversible_embedding/vars/0", {V, C});
  t.transposed("lm_head.kernel", "token_embedding/reverse_embeddings",
               "layers/reversible_embedding/vars/1", C, V);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("layers.", i, "."), a = ours + "self_attn.";
    const std::string path = cat("transformer_layer_", i, "/");
    const std::string g = cat("layers/", numbered("phi3_decoder", i), "/");
    for (const char* norm : {"pre_attention_layernorm", "post_attention_layernorm"}) {
      const bool pre = std::string(norm) == "pre_attention_layernorm";
      t.same(ours + (pre ? "input_layernorm" : "post_attention_layernorm") + ".gamma",
             path + norm + "/scale", g + norm + "/vars/0", {C});
    }
    // EinsumDense kernels: query (hidden, heads, head_dim), key and value
    // (hidden, kv heads, head_dim), output (heads, head_dim, hidden).
    const std::string p = path + "attention/", h = g + "attention/";
    t.add(a + "q_proj.kernel", p + "query/kernel", h + "query_dense/vars/0", {C, H, D},
          {C, K, G, D}, {1, 2, 3, 0});
    t.add(a + "k_proj.kernel", p + "key/kernel", h + "key_dense/vars/0", {C, K, D}, {C, K, D},
          {1, 2, 0});
    t.add(a + "v_proj.kernel", p + "value/kernel", h + "value_dense/vars/0", {C, K, D}, {C, K, D},
          {1, 2, 0});
    t.add(a + "o_proj.kernel", p + "attention_output/kernel", h + "output_dense/vars/0", {H, D, C},
          {K, G, D, C}, {3, 0, 1, 2});
    t.transposed(ours + "mlp.gate_proj.kernel", path + "feedforward_gate_dense/kernel",
                 g + "feedforward_gate_dense/vars/0", C, I);
    t.transposed(ours + "mlp.up_proj.kernel", path + "feedforward_intermediate_dense/kernel",
                 g + "feedforward_intermediate_dense/vars/0", C, I);
    t.transposed(ours + "mlp.down_proj.kernel", path + "feedforward_output_dense/kernel",
                 g + "feedforward_output_dense/vars/0", I, C);
  }
  t.same("norm.gamma", "sequence_output_layernorm/scale", "layers/phi3_layer_norm/vars/0", {C});
  return t.out;
}

json phi3_backbone_config(const LlamaConfig& c) {
  AS_CHECK(!c.tie_word_embeddings, "KerasHub preset: Phi3Backbone's head is untied");
  AS_CHECK(c.sliding_window == 0 || c.sliding_window >= c.max_position_embeddings,
           "KerasHub preset: Phi3Backbone has no sliding window; this model's is ",
           c.sliding_window, " keys");
  return {{"vocabulary_size", c.vocab_size},
          {"num_layers", c.num_hidden_layers},
          {"hidden_dim", c.hidden_size},
          {"intermediate_dim", c.intermediate_size},
          {"num_query_heads", c.num_attention_heads},
          {"num_key_value_heads", c.num_key_value_heads},
          {"layer_norm_epsilon", c.rms_norm_eps},
          {"dropout", 0.0},
          {"max_sequence_length", c.max_position_embeddings},
          {"pretraining_sequence_length", c.max_position_embeddings},
          {"rope_max_wavelength", c.rope_theta},
          {"rope_scaling_type", nullptr},
          {"rope_scaling_short_factor", nullptr},
          {"rope_scaling_long_factor", nullptr}};
}

json phi3_hf_fields(Fields& f) {
  f.only("dropout", 0.0, "autoshard's Phi-3 has no dropout");
  for (const char* k :
       {"rope_scaling_type", "rope_scaling_short_factor", "rope_scaling_long_factor"})
    if (f.has(k)) f.bad(k, "must be null: autoshard runs Phi-3's plain rotary embeddings");
  f.ignore("pretraining_sequence_length");  // used by the "su" scaling only
  return {{"model_type", "phi3"},
          {"vocab_size", f.size("vocabulary_size")},
          {"num_hidden_layers", f.size("num_layers")},
          {"hidden_size", f.size("hidden_dim")},
          {"intermediate_size", f.size("intermediate_dim")},
          {"num_attention_heads", f.size("num_query_heads")},
          {"num_key_value_heads", f.size("num_key_value_heads")},
          {"rms_norm_eps", f.real("layer_norm_epsilon", 1e-6)},
          {"rope_theta", f.real("rope_max_wavelength", 10000)},
          {"max_position_embeddings", f.size("max_sequence_length", 4096)},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", false}};
}

}  // namespace autoshard::keras_hub
