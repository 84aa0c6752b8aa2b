// BERT's and RoBERTa's KerasHub backbones (BertBackbone, RobertaBackbone) with
// their TextClassifier heads: the variables and the config both ways.
// Followed: keras-hub's models/bert, models/roberta and
// utils/transformers/convert_bert.py.
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/models/bert/formats.h"
#include "autoshard/models/keras_hub_fields.h"
#include "models/keras_hub_table.h"

namespace autoshard::keras_hub {

using nlohmann::json;

namespace {

// BertMaskedLM's head (keras_hub/src/models/bert/bert_masked_lm.py: a
// MaskedLMHead named "mlm_head" over the backbone's token_embedding, tied),
// in task.weights.h5 as Task.save_task_weights writes it
// (keras_hub/src/models/task.py; keras/src/saving/saving_lib.py): the
// functional task's layers list names the head's group after its class,
// masked_lm_head; its own variable (output_bias) is vars/0; its sublayers
// built in MaskedLMHead.build are private attributes, _intermediate_dense
// (kernel, bias) and _intermediate_layer_norm (gamma, beta); the public
// token_embedding is the backbone's, skipped.
void masked_lm_head(Table& t, const BertConfig& c) {
  const int64_t C = c.hidden_size;
  const std::string ours = "cls.predictions.", h5 = "layers/masked_lm_head/";
  t.transposed(ours + "transform.dense.kernel", "mlm_head/intermediate_dense/kernel",
               h5 + "_intermediate_dense/vars/0", C, C, true);
  t.same(ours + "transform.dense.bias", "mlm_head/intermediate_dense/bias",
         h5 + "_intermediate_dense/vars/1", {C}, true);
  t.same(ours + "transform.LayerNorm.gamma", "mlm_head/intermediate_layer_norm/gamma",
         h5 + "_intermediate_layer_norm/vars/0", {C}, true);
  t.same(ours + "transform.LayerNorm.beta", "mlm_head/intermediate_layer_norm/beta",
         h5 + "_intermediate_layer_norm/vars/1", {C}, true);
  t.same(ours + "bias", "mlm_head/output_bias", h5 + "vars/0", {c.vocab_size}, true);
}

}  // namespace

Variables bert_variables(const BertConfig& c) {
  AS_CHECK(!c.masked_lm || (!c.roberta() && c.masked_lm_keeps_pooler &&
                            c.masked_lm_epsilon() == keras_hub_masked_lm_epsilon),
           "KerasHub presets: a ", c.roberta() ? "RoBERTa" : "Hugging Face BERT",
           " masked LM has no KerasHub form here (KerasHub's BertMaskedLM keeps the pooler and "
           "normalises its head with epsilon 1e-5)");
  const int64_t C = c.hidden_size, H = c.num_attention_heads, D = c.head_dim();
  const int64_t I = c.intermediate_size, L = c.num_labels;
  const bool rob = c.roberta();
  Table t;
  t.out.class_name = rob ? "RobertaBackbone" : "BertBackbone";
  t.out.task_class_name =
      rob ? "RobertaTextClassifier" : (c.masked_lm ? "BertMaskedLM" : "BertTextClassifier");
  if (rob) {
    // TokenAndPositionEmbedding; Hugging Face numbers positions from
    // pad_token_id + 1, KerasHub from 0; no token types.
    const std::string e = "layers/token_and_position_embedding/";
    const int64_t offset = c.pad_token_id + 1, P = c.max_position_embeddings - offset;
    t.same("embeddings.word_embeddings.embeddings", "embeddings/token_embedding/embeddings",
           e + "token_embedding/vars/0", {c.vocab_size, C});
    t.add("embeddings.position_embeddings.embeddings", "embeddings/position_embedding/embeddings",
          e + "position_embedding/vars/0", {P, C}, {P, C}, {0, 1}, false, offset);
    t.out.zero_weights.push_back("embeddings.token_type_embeddings.embeddings");
  } else {
    t.same("embeddings.word_embeddings.embeddings", "token_embedding/embeddings",
           "layers/reversible_embedding/vars/0", {c.vocab_size, C});
    t.same("embeddings.position_embeddings.embeddings", "position_embedding/embeddings",
           "layers/position_embedding/vars/0", {c.max_position_embeddings, C});
    t.same("embeddings.token_type_embeddings.embeddings", "segment_embedding/embeddings",
           "layers/embedding/vars/0", {c.type_vocab_size, C});
  }
  t.layer_norm("embeddings.LayerNorm", "embeddings_layer_norm", "layers/layer_normalization", C);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string ours = cat("encoder.layer.", i, "."),
                      path = cat("transformer_layer_", i, "/");
    const std::string g = "layers/" + numbered("transformer_encoder", i) + "/";
    const std::string a = ours + "attention.self.";
    multi_head_attention(t, path + "self_attention_layer", g + "_self_attention_layer", C, H, D,
                         {a + "query", a + "key", a + "value", ours + "attention.output.dense",
                          /*heads_first=*/true, /*key_bias=*/true});
    t.layer_norm(ours + "attention.output.LayerNorm", path + "self_attention_layer_norm",
                 g + "_self_attention_layer_norm", C);
    feedforward(t, path, g, C, I, ours + "intermediate.dense", ours + "output.dense", true);
    t.layer_norm(ours + "output.LayerNorm", path + "feedforward_layer_norm",
                 g + "_feedforward_layer_norm", C);
  }
  // BERT's pooler is the backbone's pooled_dense; RoBERTa's classifier
  // head (dense + tanh, then out_proj) is the task's pooled_dense and logits.
  const std::string pooled = rob ? "classifier.dense" : "pooler.dense";
  const std::string logits = rob ? "classifier.out_proj" : "classifier";
  t.transposed(pooled + ".kernel", "pooled_dense/kernel", "layers/dense/vars/0", C, C, rob);
  t.same(pooled + ".bias", "pooled_dense/bias", "layers/dense/vars/1", {C}, rob);
  if (c.masked_lm) {
    masked_lm_head(t, c);
    return t.out;
  }
  const std::string lg = rob ? "layers/dense_1/vars/" : "layers/dense/vars/";
  t.transposed(logits + ".kernel", "logits/kernel", lg + "0", C, L, true);
  t.same(logits + ".bias", "logits/bias", lg + "1", {L}, true);
  return t.out;
}

json bert_hf_fields(Fields& f, bool roberta) {
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

json bert_backbone_config(const BertConfig& c) {
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
}

}  // namespace autoshard::keras_hub
