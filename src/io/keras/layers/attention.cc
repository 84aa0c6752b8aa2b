// Keras's attention layers: MultiHeadAttention (the C++ layer of
// autoshard/nn/layers.h), and Attention, the dot-product (Luong-style)
// layer, with AdditiveAttention (Bahdanau-style scores), composed here from
// existing ops: einsum, softmax, tanh, a sum and the Dropout layer.
// keras/src/layers/attention/attention.py, class Attention:
//   scores  "dot":    q k^T, times the scalar weight `scale` (use_scale);
//           "concat": concat_score_weight * sum(tanh(scale * (q + k)), -1)
//   masks   the value's mask and use_causal_mask (position i attends to j <= i)
//           move excluded scores by -1e9 (_apply_scores, _calculate_score_mask)
//   output  softmax(scores) (dropout while training) times the value, zero
//           where the query is masked; return_attention_scores: the
//           probabilities too. The output keeps the query's mask (compute_mask).
// Inputs are [query, value] or [query, value, key] ([batch, T, dim]).
// use_causal_mask and return_attention_scores are call arguments in Keras:
// a file's node kwargs, which the table's builders read as fields.
#include <memory>
#include <optional>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/causal_softmax.h"
#include "autoshard/nn/trace.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

namespace {

struct KerasAttentionOptions {
  bool use_scale = false;
  bool concat = false;    // score_mode "concat" (else "dot")
  bool additive = false;  // AdditiveAttention's scores
  double dropout = 0;
  uint64_t seed = 0;
  bool causal = false;
  bool return_scores = false;
};

class KerasAttention : public LayerImpl {
 public:
  KerasAttention(std::string name, KerasAttentionOptions o)
      : LayerImpl(layer_name_or_default(name, o.additive ? "additive_attention" : "attention")),
        o_(o),
        dropout_(Dropout(o.dropout, o.seed, "dropout")) {}

  int output_count() const override { return o_.return_scores ? 2 : 1; }
  Value call(Trace& t, const std::vector<Value>& in) override { return call_outputs(t, in)[0]; }
  std::vector<Value> call_outputs(Trace& t, const std::vector<Value>& in) override {
    AS_CHECK(in.size() == 2 || in.size() == 3, "layer ", name(),
             " (Attention) takes [query, value] or [query, value, key], got ", in.size(),
             " inputs");
    const Value& q = in[0];
    const Value& v = in[1];
    const Value& k = in.size() == 3 ? in[2] : v;
    AS_CHECK(q.rank() == 3 && v.rank() == 3 && k.rank() == 3 && q.dim(2) == k.dim(2) &&
                 k.dim(1) == v.dim(1),
             "layer ", name(), " (Attention) needs query [batch, Tq, dim], value [batch, Tv, ",
             "dim_v] and key [batch, Tv, dim], got ", shape_str(q.shape()), ", ",
             shape_str(v.shape()), " and ", shape_str(k.shape()));
    Value scores = this->scores(t, q, k);
    // _apply_scores: excluded (query, key) pairs' scores lowered by 1e9.
    const Value v_mask = t.mask(v);
    if (v_mask.valid()) {
      const Value keep = ops::reshape(v_mask, {v.dim(0), 1, v.dim(1)});
      scores = scores + ops::scale(keep - ops::constant(t.graph(), {}, 1.0), 1e9);
    }
    Value probs = o_.causal ? keras_causal_softmax(scores) : ops::softmax(scores);
    probs = dropout_(t, probs);  // a no-op outside training
    Value out = ops::einsum("bqk,bkd->bqd", probs, v);
    if (const Value q_mask = t.mask(q); q_mask.valid())
      out = out * ops::reshape(q_mask, {q.dim(0), q.dim(1), 1});
    if (o_.return_scores) return {out, probs};
    return {out};
  }
  Value compute_mask(Trace& t, const std::vector<Value>& in) override {
    return mask_of_first(t, in);
  }

 private:
  // _calculate_scores: [B, Tq, Tv].
  Value scores(Trace& t, const Value& q, const Value& k) {
    if (o_.additive) return additive_scores(t, q, k);
    std::optional<Value> scale;
    if (o_.use_scale) scale = t.weight("scale", {}, Initializer::ones());
    if (!o_.concat) {
      const Value s = ops::einsum("bqd,bkd->bqk", q, k);
      return scale ? s * *scale : s;
    }
    const Value weight = t.weight("concat_score_weight", {}, Initializer::ones());
    Value sum = ops::reshape(q, {q.dim(0), q.dim(1), 1, q.dim(2)}) +
                ops::reshape(k, {k.dim(0), 1, k.dim(1), k.dim(2)});
    if (scale) sum = sum * *scale;
    return ops::reduce_sum(ops::tanh(sum), {3}) * weight;
  }

  // AdditiveAttention._calculate_scores: sum(scale * tanh(q + k), -1), its
  // scale a weight [dim] (glorot_uniform) with use_scale, else 1.
  Value additive_scores(Trace& t, const Value& q, const Value& k) {
    const Value sum = ops::tanh(ops::reshape(q, {q.dim(0), q.dim(1), 1, q.dim(2)}) +
                                ops::reshape(k, {k.dim(0), 1, k.dim(1), k.dim(2)}));
    if (!o_.use_scale) return ops::reduce_sum(sum, {3});
    return ops::einsum("bqkd,d->bqk", sum,
                       t.weight("scale", {q.dim(2)}, Initializer::glorot_uniform()));
  }

  KerasAttentionOptions o_;
  Layer dropout_;
};

// Keras 3's Attention config (get_config: use_scale, score_mode, dropout;
// seed) and its call arguments use_causal_mask and return_attention_scores.
// Weights in build's order: scale (use_scale), concat_score_weight.
// AdditiveAttention (additive_attention.py): use_scale defaults to true,
// no score_mode.
BuiltLayer keras_attention(LayerConfig& f, bool additive) {
  KerasAttentionOptions o;
  o.additive = additive;
  o.use_scale = f.boolean("use_scale", additive);
  if (!additive) {
    const std::string mode = f.string("score_mode", "dot");
    if (mode != "dot" && mode != "concat")
      f.bad("score_mode", mode, "must be \"dot\" or \"concat\"");
    o.concat = mode == "concat";
  }
  o.dropout = f.number("dropout", 0);
  if (o.dropout < 0 || o.dropout >= 1) f.bad("dropout", o.dropout, "must be in [0, 1)");
  o.seed = f.ctx().seed;
  o.causal = f.boolean("use_causal_mask", false);
  o.return_scores = f.boolean("return_attention_scores", false);
  std::vector<std::string> weights;
  if (o.use_scale) weights.push_back("scale");
  if (o.concat) weights.push_back("concat_score_weight");
  return {Layer(std::make_shared<KerasAttention>(f.name(), o)), plain_roles(weights)};
}

// keras/src/layers/attention/multi_head_attention.py, get_config: the
// query, key and value projections and the output one over [batch, T,
// features] (attention_axes and output_shape: their defaults only). Keras
// 3.3+ saves the projections as the properties query_dense, key_dense,
// value_dense and output_dense; Keras 2 names them query, key, value and
// attention_output, as the C++ layer does.
BuiltLayer keras_multi_head_attention(LayerConfig& f) {
  const int64_t heads = f.positive("num_heads"), key_dim = f.positive("key_dim");
  int64_t value_dim = 0;  // absent or null: key_dim
  if (f.has("value_dim"))
    value_dim = f.positive("value_dim");
  else
    f.expect("value_dim", nullptr);
  const double dropout = f.number("dropout", 0);
  if (dropout < 0 || dropout >= 1) f.bad("dropout", dropout, "must be in [0, 1)");
  const bool bias = f.boolean("use_bias", true);
  f.expect("output_shape", nullptr, "is not supported (the query's features)");
  f.expect("attention_axes", nullptr, "is not supported (the time axis)");
  f.expect("flash_attention", nullptr);
  f.weight_extras({"kernel", "bias"});
  const Initializer kernel = f.initializer_or("kernel_initializer", Initializer::glorot_uniform());
  MultiHeadAttentionOptions o;
  o.value_dim(value_dim).dropout(dropout).use_bias(bias).name(f.name());
  o.kernel_initializer(kernel).output_kernel_initializer(kernel);
  o.use_causal_mask(f.boolean("use_causal_mask", false));
  std::vector<WeightRole> roles;
  for (const auto& [cpp, k3] : {std::pair{"query", "query_dense"},
                                {"key", "key_dense"},
                                {"value", "value_dense"},
                                {"attention_output", "output_dense"}}) {
    roles.push_back({cat(cpp, ".kernel"), cat(k3, "/vars/0"), cat(cpp, "/kernel")});
    if (bias) roles.push_back({cat(cpp, ".bias"), cat(k3, "/vars/1"), cat(cpp, "/bias")});
  }
  return {MultiHeadAttention(heads, key_dim, o), roles};
}

}  // namespace

void add_attention_layers(LayerTable& table) {
  table.add("Attention", [](LayerConfig& f) { return keras_attention(f, false); });
  table.add("AdditiveAttention", [](LayerConfig& f) { return keras_attention(f, true); });
  table.add("MultiHeadAttention", keras_multi_head_attention);
}

}  // namespace autoshard::keras
