// Phi3Config (transformers' models/phi3/configuration_phi3.py) read into the
// Llama config of the same model, field by field.
#include "autoshard/error.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/phi3/phi3.h"

namespace autoshard {

namespace {

// Values that would make another model than Llama's blocks run: a rope
// scaling (Phi-3's 128k "longrope"), a partial rotary factor (Phi-4-mini),
// dropout, another activation.
void refuse_other_models(const ConfigReader& r) {
  AS_CHECK(!r.has("rope_scaling"), r.where("rope_scaling"),
           " is not supported (autoshard runs Phi-3's plain rotary embeddings, as the 4k models "
           "have; the 128k models' \"longrope\" scaling is not implemented)");
  double partial = 1;
  r.real("partial_rotary_factor", partial, 0, 1.5, true);
  AS_CHECK(partial == 1, r.where("partial_rotary_factor"), " = ", partial,
           " is not supported (rotary embeddings over the whole head only)");
  for (const char* key : {"resid_pdrop", "embd_pdrop", "attention_dropout"}) {
    double rate = 0;
    r.real(key, rate, 0, 1, false);
    AS_CHECK(rate == 0, r.where(key), " = ", rate,
             " is not supported: autoshard's Phi-3 has no dropout (set it to 0.0)");
  }
  std::string act = "silu";
  r.text("hidden_act", act);
  AS_CHECK(act == "silu", r.where("hidden_act"), " = '", act, "' is not supported (silu)");
}

}  // namespace

LlamaConfig phi3_config(const ConfigReader& r) {
  AS_CHECK(r.model_type() == "phi3", r.where("model_type"), " is '", r.model_type(),
           "'; the Phi-3 family reads phi3");
  refuse_other_models(r);
  LlamaConfig c;
  c.model_type = "phi3";
  r.size("vocab_size", c.vocab_size, true);
  r.size("hidden_size", c.hidden_size, true);
  r.size("intermediate_size", c.intermediate_size, true);
  r.size("num_hidden_layers", c.num_hidden_layers, true);
  r.size("num_attention_heads", c.num_attention_heads, true);
  c.num_key_value_heads = c.num_attention_heads;
  r.size("num_key_value_heads", c.num_key_value_heads, false);
  c.head_dim = c.hidden_size / c.num_attention_heads;  // Phi3Attention's head_dim
  AS_CHECK(c.head_dim * c.num_attention_heads == c.hidden_size, r.where("hidden_size"), " = ",
           c.hidden_size, " must be a multiple of num_attention_heads = ", c.num_attention_heads);
  AS_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, r.where("num_attention_heads"),
           " = ", c.num_attention_heads,
           " must be a multiple of \"num_key_value_heads\" = ", c.num_key_value_heads);
  r.size("max_position_embeddings", c.max_position_embeddings, true);
  r.real("rms_norm_eps", c.rms_norm_eps, 0, 1, true);
  r.real("rope_theta", c.rope_theta, 1, 1e12, false);
  // Phi-3-mini-4k's sliding_window (2047) is Mistral's: keys further back
  // are not seen.
  r.size("sliding_window", c.sliding_window, false);
  c.tie_word_embeddings = false;
  r.flag("tie_word_embeddings", c.tie_word_embeddings);
  c.validate();
  return c;
}

}  // namespace autoshard
