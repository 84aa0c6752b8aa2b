#include "autoshard/models/bert/bert.h"

#include <cmath>
#include <optional>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/layers.h"
#include "models/hf_layers.h"

namespace autoshard {

LayoutMap bert_megatron_layout(const std::string& m) {
  LayoutMap map;
  const std::optional<std::string> model = m, none;
  map["word_embeddings\\.embeddings$"] = {model, none};
  map["attention\\.self\\.(query|key|value)\\.kernel$"] = {model, none, none};
  map["attention\\.self\\.(query|key|value)\\.bias$"] = {model, none};
  map["attention\\.output\\.dense\\.kernel$"] = {none, model, none};
  map["intermediate\\.dense\\.kernel$"] = {model, none};
  map["intermediate\\.dense\\.bias$"] = {model};
  map["layer\\.[0-9]+\\.output\\.dense\\.kernel$"] = {none, model};
  return map;
}

namespace {

Layer layer_norm(const BertConfig& c, const char* name) {
  return LayerNormalization(LayerNormalizationOptions().epsilon(c.layer_norm_eps).name(name));
}

Layer embedding(int64_t rows, int64_t width, const char* name) {
  return Embedding(
      rows, width,
      EmbeddingOptions().embeddings_initializer(Initializer::normal(0.0, 0.02)).name(name));
}

// A dense layer of a [batch, C] value, in nn.Linear's order, with a bias.
Value dense(Trace& t, Value x, int64_t out, const char* name) {
  return hf_projection("bc,oc->bo", {out}, name, "o")(t, x);
}

}  // namespace

Bert::Bert(BertConfig c, int64_t seq_len, uint64_t seed)
    : Model({InputSpec{{seq_len}, DType::I32, "token_ids"},
             InputSpec{{seq_len}, DType::I32, "segment_ids"},
             InputSpec{{seq_len}, DType::F32, "padding_mask"}},
            c.model_type),
      config_(c) {
  c.validate();
  AS_CHECK(seq_len > 0 && seq_len + c.position_offset() <= c.max_position_embeddings,
           "sequence length ", seq_len, " must be between 1 and the model's positions (",
           c.max_position_embeddings - c.position_offset(), ")");
  set_seed(seed);
  const int64_t H = c.num_attention_heads, D = c.head_dim(), C = c.hidden_size;
  const int64_t I = c.intermediate_size;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    blocks_.push_back(
        Block{hf_projection("bsc,hdc->bshd", {-1, H, D}, "query", "hd"),
              hf_projection("bsc,hdc->bshd", {-1, H, D}, "key"),
              hf_projection("bsc,hdc->bshd", {-1, H, D}, "value", "hd"),
              hf_projection("bshd,chd->bsc", {-1, C}, "dense", "c"), layer_norm(c, "LayerNorm"),
              hf_projection("bsc,ic->bsi", {-1, I}, "dense", "i"),
              hf_projection("bsi,ci->bsc", {-1, C}, "dense", "c"), layer_norm(c, "LayerNorm")});
}

// Self-attention of x [B, S, C] with `key_bias` [B, 1, 1, S] added to the
// scores (minus a large number at padding).
Value Bert::attention(Trace& t, const Block& b, Value x, Value key_bias) const {
  const BertConfig& c = config_;
  Value q, k, v;
  {
    Trace::Scope self(t, "self");
    q = b.query(t, x);
    k = with_softmax_ignored_bias(t, b.key(t, x), "key");
    v = b.value(t, x);
    if (c.lora.enabled()) {
      q = q + lora_update(t, c.lora, x, q, "query");
      v = v + lora_update(t, c.lora, x, v, "value");
    }
  }
  Value scores = ops::scale(ops::einsum("bqhd,bkhd->bhqk", q, k), 1.0 / std::sqrt(c.head_dim()));
  Value probs = ops::softmax(scores + key_bias);             // [B, H, S, S]
  Value context = ops::einsum("bhqk,bkhd->bqhd", probs, v);  // [B, S, H, D]
  Trace::Scope output(t, "output");
  Value h = training_dropout(t, b.attention_output(t, context), c.dropout, "dropout");
  return b.attention_norm(t, x + h);
}

Value Bert::call(Trace& t, const std::vector<Value>& inputs) {
  const BertConfig& c = config_;
  Graph& g = t.graph();
  Value tokens = inputs.at(0), segments = inputs.at(1), keep = inputs.at(2);  // [B, S]
  const int64_t B = tokens.dim(0), S = tokens.dim(1);
  Value x;
  {
    Trace::Scope e(t, "embeddings");
    Value positions;
    {
      Trace::Scope p(t, "position_embeddings");
      Value table = t.weight("embeddings", {c.max_position_embeddings, c.hidden_size},
                             Initializer::normal(0.0, 0.02));
      positions = ops::gather(table, ops::iota(g, {S}), c.position_offset());  // [S, C]
      if (c.roberta()) {
        // RoBERTa numbers only the tokens (from pad + 1); padding reads the
        // pad row. With padding at the end, that is row pad + 1 + s where
        // the mask is 1 and row pad where it is 0.
        Value pad_row = ops::gather(table, ops::iota(g, {1}), c.pad_token_id);  // [1, C]
        Value keep3 = ops::reshape(keep, {B, S, 1});
        positions =
            keep3 * positions + (ops::constant(g, {B, S, 1}, 1.0) - keep3) * pad_row;  // [B, S, C]
      }
    }
    x = embedding(c.vocab_size, c.hidden_size, "word_embeddings")(t, tokens) + positions +
        embedding(c.type_vocab_size, c.hidden_size, "token_type_embeddings")(t, segments);
    x = training_dropout(t, layer_norm(c, "LayerNorm")(t, x), c.dropout, "dropout");
  }
  // 0 where a key is a token, -1e9 where it is padding: after softmax,
  // exactly no weight on padding.
  Value key_bias =
      ops::reshape(ops::scale(keep + ops::constant(g, {B, S}, -1.0), 1e9), {B, 1, 1, S});
  for (size_t i = 0; i < blocks_.size(); ++i) {
    Trace::Scope scope(t, "encoder.layer." + std::to_string(i));
    g.open_region();
    const Block& b = blocks_[i];
    {
      Trace::Scope a(t, "attention");
      x = attention(t, b, x, key_bias);
    }
    Value h;
    {
      Trace::Scope m(t, "intermediate");
      h = ops::gelu(b.intermediate(t, x), /*tanh_approximation=*/false);
    }
    Trace::Scope o(t, "output");
    x = b.output_norm(t, x + training_dropout(t, b.output(t, h), c.dropout, "dropout"));
    g.close_region();
  }
  // LoRA freezes the backbone (the encoder, and BERT's pooler below), not
  // the task's head: KerasHub's Backbone.enable_lora.
  if (c.lora.enabled()) freeze_all_but_adapters(t);
  return c.masked_lm ? masked_lm_head(t, x) : classification_head(t, x);
}

// The first token of each sequence ([CLS] / <s>): [S, B, C] row 0, [B, C].
Value Bert::first_token(Trace& t, Value x) const {
  return ops::reshape(ops::gather(ops::transpose(x, {1, 0, 2}), ops::iota(t.graph(), {1})),
                      {x.dim(0), config_.hidden_size});
}

Value Bert::classification_head(Trace& t, Value x) const {
  const BertConfig& c = config_;
  Value first = first_token(t, x);
  if (c.roberta()) {
    Trace::Scope head(t, "classifier");
    Value h = ops::tanh(
        dense(t, training_dropout(t, first, c.dropout, "dropout"), c.hidden_size, "dense"));
    return dense(t, training_dropout(t, h, c.dropout, "dropout"), c.num_labels, "out_proj");
  }
  Value pooled;
  {
    Trace::Scope pooler(t, "pooler");
    pooled = ops::tanh(dense(t, first, c.hidden_size, "dense"));
  }
  if (c.lora.enabled()) freeze_all_but_adapters(t);
  return dense(t, training_dropout(t, pooled, c.dropout, "dropout"), c.num_labels, "classifier");
}

// dense + GELU + LayerNorm, then the tied word embeddings and a bias:
// logits [B, S, V] (KerasHub's MaskedLMHead gathers the masked positions
// first; the head is per position, so its logits are these rows).
Value Bert::masked_lm_head(Trace& t, Value x) const {
  const BertConfig& c = config_;
  if (c.masked_lm_keeps_pooler) {
    // The pooler, frozen (declared non-trainable before the dense layer
    // reads it), enters as 0 * its output, as GPT-2's key bias does.
    Trace::Scope pooler(t, "pooler");
    t.weight("dense.kernel", {c.hidden_size, c.hidden_size}, Initializer::zeros(), false);
    t.weight("dense.bias", {c.hidden_size}, Initializer::zeros(), false);
    Value pooled = ops::tanh(dense(t, first_token(t, x), c.hidden_size, "dense"));
    x = x + ops::broadcast_to(ops::reshape(ops::scale(pooled, 0.0), {x.dim(0), 1, c.hidden_size}),
                              x.shape());
  }
  Value words;
  {
    Trace::Scope e(t, "embeddings.word_embeddings");
    words = t.weight("embeddings", {c.vocab_size, c.hidden_size}, Initializer::normal(0.0, 0.02));
  }
  Trace::Scope head(t, c.roberta() ? "lm_head" : "cls.predictions");
  Value h;
  {
    std::optional<Trace::Scope> transform;
    if (!c.roberta()) transform.emplace(t, "transform");
    h = ops::gelu(hf_projection("bsc,oc->bso", {-1, c.hidden_size}, "dense", "o")(t, x),
                  /*tanh_approximation=*/false);
    h = LayerNormalization(LayerNormalizationOptions()
                               .epsilon(c.masked_lm_epsilon())
                               .name(c.roberta() ? "layer_norm" : "LayerNorm"))(t, h);
  }
  Value bias = t.weight("bias", {c.vocab_size}, Initializer::zeros());
  return ops::einsum("bsc,vc->bsv", h, words) + bias;
}

}  // namespace autoshard
