#include "autoshard/nn/layers.h"

#include <cmath>
#include <map>
#include <mutex>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/causal_softmax.h"
#include "autoshard/nn/lora.h"
#include "autoshard/nn/masking.h"
#include "ir/einsum_equation.h"
#include "tensor/rng.h"

namespace autoshard {

std::string default_layer_name(const std::string& base) {
  static std::mutex mu;
  static std::map<std::string, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  int n = counts[base]++;
  return n == 0 ? base : base + "_" + std::to_string(n);
}

std::string layer_name_or_default(const std::string& given, const std::string& base) {
  return given.empty() ? default_layer_name(base) : given;
}

SymbolicTensor Input(Shape shape, DType dtype, std::string name) {
  auto node = std::make_shared<SymbolicTensor::Node>();
  node->shape = std::move(shape);
  node->dtype = dtype;
  node->name = name.empty() ? default_layer_name("input") : std::move(name);
  return SymbolicTensor(std::move(node));
}

SymbolicTensor::Node::~Node() {
  std::vector<SymbolicTensor> pending = std::move(inputs);
  while (!pending.empty()) {
    SymbolicTensor t = std::move(pending.back());
    pending.pop_back();
    // The last owner: take the node's inputs before it goes, so that its
    // own destructor finds none. (Made by make_shared as non-const.)
    if (t.node_.use_count() == 1) {
      auto& node = const_cast<Node&>(*t.node_);
      for (SymbolicTensor& in : node.inputs) pending.push_back(std::move(in));
      node.inputs.clear();
    }
  }
}

Value LayerImpl::compute_mask(Trace&, const std::vector<Value>&) {
  return {};
}

Value LayerImpl::mask_of_first(const Trace& trace, const std::vector<Value>& inputs) {
  return inputs.empty() ? Value{} : trace.mask(inputs[0]);
}

Value Layer::operator()(Trace& trace, const std::vector<Value>& inputs) const {
  return outputs(trace, inputs).at(0);
}

// Keras's Layer.__call__: the call, then the output's mask from
// compute_mask (unless the call set one), then the activity regularizer.
std::vector<Value> Layer::outputs(Trace& trace, const std::vector<Value>& inputs) const {
  Trace::Scope scope(trace, impl_->name());
  std::vector<Value> outs = impl_->call_outputs(trace, inputs);
  AS_CHECK(static_cast<int>(outs.size()) == impl_->output_count(), "layer ", name(), " made ",
           outs.size(), " outputs, not ", impl_->output_count());
  if (!trace.mask(outs[0]).valid())
    if (Value mask = impl_->compute_mask(trace, inputs); mask.valid())
      trace.set_mask(outs[0], mask);
  if (const Trace::Penalty* penalty = trace.activity_penalty()) trace.add_loss((*penalty)(outs[0]));
  return outs;
}

SymbolicTensor Layer::operator()(const std::vector<SymbolicTensor>& inputs) const {
  auto node = std::make_shared<SymbolicTensor::Node>();
  node->inputs = inputs;
  node->layer = std::make_shared<Layer>(*this);
  return SymbolicTensor(std::move(node));
}

std::vector<SymbolicTensor> Layer::outputs(const std::vector<SymbolicTensor>& inputs) const {
  std::vector<SymbolicTensor> outs{(*this)(inputs)};
  for (int k = 1; k < output_count(); ++k) {
    auto node = std::make_shared<SymbolicTensor::Node>();
    node->inputs = {outs[0]};
    node->layer = outs[0].node().layer;
    node->output = k;
    outs.emplace_back(std::move(node));
  }
  return outs;
}

namespace {
// Keras 3's activation functions (keras.activations), by name, with their
// default arguments (leaky_relu's negative_slope 0.2, elu's alpha 1).
struct NamedActivation {
  const char* name;
  Value (*apply)(Value x);
};
const NamedActivation kActivations[] = {
    {"linear", [](Value x) { return x; }},
    {"relu", [](Value x) { return ops::relu(x); }},
    {"relu6", [](Value x) { return ops::unary(x, UnaryFn::Relu6); }},
    {"leaky_relu", [](Value x) { return ops::unary(x, UnaryFn::LeakyRelu, 0.2); }},
    {"elu", [](Value x) { return ops::unary(x, UnaryFn::Elu, 1.0); }},
    {"selu", [](Value x) { return ops::unary(x, UnaryFn::Selu); }},
    {"gelu", [](Value x) { return ops::gelu(x, false); }},
    {"gelu_tanh", [](Value x) { return ops::gelu(x, true); }},
    {"gelu_new", [](Value x) { return ops::gelu(x, true); }},
    {"sigmoid", [](Value x) { return ops::sigmoid(x); }},
    {"hard_sigmoid", [](Value x) { return ops::unary(x, UnaryFn::HardSigmoid); }},
    // Keras 2's and TF.js's hard_sigmoid, clip(0.2 x + 0.5, 0, 1), which is
    // Keras 3's relu6(y + 3) / 6 at y = 1.2 x (the Keras file readers pick it
    // for files saved by Keras 2).
    {"hard_sigmoid_keras2",
     [](Value x) { return ops::unary(ops::scale(x, 1.2), UnaryFn::HardSigmoid); }},
    {"hard_silu", [](Value x) { return ops::unary(x, UnaryFn::HardSilu); }},
    {"hard_swish", [](Value x) { return ops::unary(x, UnaryFn::HardSilu); }},
    {"tanh", [](Value x) { return ops::tanh(x); }},
    {"softmax", [](Value x) { return ops::softmax(x); }},
    {"log_softmax", [](Value x) { return ops::log_softmax(x); }},
    {"silu", [](Value x) { return ops::silu(x); }},
    {"swish", [](Value x) { return ops::silu(x); }},
    {"softplus", [](Value x) { return ops::unary(x, UnaryFn::Softplus); }},
    {"softsign", [](Value x) { return ops::unary(x, UnaryFn::Softsign); }},
    {"mish", [](Value x) { return ops::unary(x, UnaryFn::Mish); }},
    {"exponential", [](Value x) { return ops::unary(x, UnaryFn::Exp); }},
};
const NamedActivation* find_activation(const std::string& name) {
  for (const NamedActivation& a : kActivations)
    if (name == a.name) return &a;
  return nullptr;
}
}  // namespace

void check_activation(const std::string& a) {
  if (a.empty() || find_activation(a)) return;
  std::string known;
  for (const NamedActivation& n : kActivations)
    known += std::string(known.empty() ? "" : ", ") + n.name;
  fail("unknown activation '", a, "' (known: ", known, ")");
}

Value apply_activation(Value x, const std::string& activation) {
  check_activation(activation);
  if (activation.empty()) return x;
  return find_activation(activation)->apply(x);
}

namespace {

Value single(const std::vector<Value>& inputs, const std::string& layer) {
  AS_CHECK(inputs.size() == 1, "layer ", layer, " takes one input, got ", inputs.size());
  return inputs[0];
}

// ---- Dense ----
class DenseImpl : public LayerImpl {
 public:
  DenseImpl(int64_t units, DenseOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "dense")), units_(units), o_(std::move(o)) {
    AS_CHECK(units > 0, "Dense: units must be positive, got ", units);
    check_activation(o_.activation_);
  }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = single(inputs, name());
    AS_CHECK(x.rank() >= 1, "Dense ", name(), " needs an input with a feature axis");
    Value kernel = t.weight("kernel", {x.dim(-1), units_}, o_.kernel_initializer_);
    std::string lead = std::string("abcdefgh").substr(0, x.rank() - 1);
    Value y = ops::einsum(lead + "y," + "yz->" + lead + "z", x, kernel);
    if (o_.use_bias_) y = y + t.weight("bias", {units_}, o_.bias_initializer_);
    return apply_activation(y, o_.activation_);
  }
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  int64_t units_;
  DenseOptions o_;
};

// ---- EinsumDense ----
class EinsumDenseImpl : public LayerImpl {
 public:
  EinsumDenseImpl(std::string eq, Shape out, EinsumDenseOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "einsum_dense")),
        eq_(std::move(eq)),
        out_(std::move(out)),
        o_(std::move(o)) {
    parse_einsum(eq_);
    check_activation(o_.activation_);
  }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = single(inputs, name());
    EinsumEquation e = parse_einsum(eq_);
    AS_CHECK(static_cast<int>(e.a.size()) == x.rank(), "EinsumDense ", name(), ": equation '", eq_,
             "' expects a rank-", e.a.size(), " input, got ", shape_str(x.shape()));
    AS_CHECK(out_.size() + 1 == e.out.size(), "EinsumDense ", name(), ": output_shape ",
             shape_str(out_), " must give the ", e.out.size() - 1, " output dims after the batch");
    auto size_of = [&](char c) -> int64_t {
      if (size_t i = e.a.find(c); i != std::string::npos) return x.dim(static_cast<int>(i));
      size_t j = e.out.find(c);
      AS_CHECK(j != std::string::npos && j > 0, "EinsumDense ", name(),
               ": cannot size kernel letter '", c, "'");
      return out_[j - 1];
    };
    Shape kshape;
    for (char c : e.b) kshape.push_back(size_of(c));
    Value y = ops::einsum(eq_, x, t.weight("kernel", kshape, o_.kernel_initializer_));
    if (!o_.bias_axes_.empty()) {
      Shape bshape, bview;
      for (char c : o_.bias_axes_) bshape.push_back(size_of(c));
      size_t first = e.out.find(o_.bias_axes_[0]);
      for (size_t i = first; i < e.out.size(); ++i)
        bview.push_back(
            o_.bias_axes_.find(e.out[i]) != std::string::npos ? y.dim(static_cast<int>(i)) : 1);
      Value bias = t.weight("bias", bshape, o_.bias_initializer_);
      y = y + ops::reshape(bias, bview);
    }
    return apply_activation(y, o_.activation_);
  }

 private:
  std::string eq_;
  Shape out_;
  EinsumDenseOptions o_;
};

// ---- Embedding ----
class EmbeddingImpl : public LayerImpl {
 public:
  EmbeddingImpl(int64_t in, int64_t out, EmbeddingOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "embedding")),
        in_(in),
        out_(out),
        o_(std::move(o)) {
    AS_CHECK(!o_.mask_zero_ || in_ >= 2, "Embedding ", name(),
             ": mask_zero needs input_dim of at least 2 (id 0 is the padding), got ", in_);
  }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value ids = single(inputs, name());
    AS_CHECK(ids.dtype() == DType::I32, "Embedding ", name(), " needs i32 ids");
    return ops::gather(t.weight("embeddings", {in_, out_}, o_.embeddings_initializer_), ids);
  }
  // Keras's Embedding.compute_mask: ids != 0, read from a table of input_dim
  // entries (0 for id 0, 1 for the others) with the ids' own gather.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    if (!o_.mask_zero_) return {};
    Value keep = ops::pad(ops::constant(t.graph(), {in_ - 1}, 1.0), {1}, {0});
    return ops::gather(keep, inputs.at(0));
  }

 private:
  int64_t in_, out_;
  EmbeddingOptions o_;
};

// ---- LayerNormalization ----
class LayerNormImpl : public LayerImpl {
 public:
  explicit LayerNormImpl(LayerNormalizationOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "layer_normalization")), o_(std::move(o)) {}
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = single(inputs, name());
    if (o_.rms_scaling_) {
      const bool offset = o_.gamma_offset_ != 0;
      Value gamma =
          t.weight("gamma", {x.dim(-1)}, offset ? Initializer::zeros() : Initializer::ones());
      if (offset) gamma = gamma + ops::constant(t.graph(), {x.dim(-1)}, o_.gamma_offset_);
      return ops::normalize(x, o_.epsilon_, false) * gamma;
    }
    Value y = ops::normalize(x, o_.epsilon_);
    if (o_.scale_) y = y * t.weight("gamma", {x.dim(-1)}, Initializer::ones());
    if (o_.center_) y = y + t.weight("beta", {x.dim(-1)}, Initializer::zeros());
    return y;
  }
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  LayerNormalizationOptions o_;
};

// ---- Dropout ----
class DropoutImpl : public LayerImpl {
 public:
  DropoutImpl(double rate, uint64_t seed, std::string name)
      : LayerImpl(layer_name_or_default(name, "dropout")), rate_(rate), seed_(seed) {
    AS_CHECK(rate >= 0 && rate < 1, "Dropout rate must be in [0, 1), got ", rate);
  }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = single(inputs, name());
    if (!t.training() || rate_ == 0) return x;
    // Key the mask by the layer's path so two dropout layers never share one.
    uint64_t key = stable_hash(t.path("mask").c_str()) ^ (seed_ + t.seed() * 0x9E3779B97F4A7C15ull);
    return ops::dropout(x, rate_, key);
  }
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  double rate_;
  uint64_t seed_;
};

// ---- MultiHeadAttention ----
// Queries x keys from which attention runs fused (ops::attention): causal
// attention over GPT-2's heads, forward and backward (bench/attention.cc),
// runs fused 1.05-1.12x as fast as the batched products at length 64,
// 1.25-1.56x at 128, and 0.56-0.85x at 16 and 32.
constexpr int64_t kFusedAttentionScores = 64 * 64;

class MultiHeadAttentionImpl : public LayerImpl {
 public:
  MultiHeadAttentionImpl(int64_t heads, int64_t key_dim, MultiHeadAttentionOptions o)
      : LayerImpl(layer_name_or_default(o.name_, "multi_head_attention")),
        heads_(heads),
        key_dim_(key_dim),
        value_dim_(o.value_dim_ ? o.value_dim_ : key_dim),
        o_(std::move(o)) {
    AS_CHECK(heads > 0 && key_dim > 0,
             "MultiHeadAttention: num_heads and key_dim must be positive");
    auto proj = [&](const char* n, int64_t dim, bool bias) {
      // The time dim (-1) comes from the input; only heads and dim size the kernel.
      return EinsumDense("btc,chd->bthd", {-1, heads_, dim},
                         EinsumDenseOptions()
                             .bias_axes(bias ? "hd" : "")
                             .name(n)
                             .kernel_initializer(o_.kernel_initializer_));
    };
    query_ = std::make_unique<EinsumDense>(proj("query", key_dim_, o_.use_bias_));
    key_ = std::make_unique<EinsumDense>(proj("key", key_dim_, o_.use_bias_ && o_.key_bias_));
    value_ = std::make_unique<EinsumDense>(proj("value", value_dim_, o_.use_bias_));
  }
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    AS_CHECK(inputs.size() == 1 || inputs.size() == 2, "MultiHeadAttention ", name(),
             " takes (query) or (query, value)");
    Value q_in = inputs[0], kv_in = inputs.back();
    AS_CHECK(q_in.rank() == 3 && kv_in.rank() == 3, "MultiHeadAttention ", name(),
             " needs [batch, time, features] inputs");
    Value q = (*query_)(t, q_in);
    Value k = (*key_)(t, kv_in);
    Value v = (*value_)(t, kv_in);
    if (lora_.enabled()) {  // LoraMultiHeadAttention (autoshard/nn/lora.h)
      q = q + lora_update(t, lora_, q_in, q, "query");
      v = v + lora_update(t, lora_, kv_in, v, "value");
    }
    const double scale = 1.0 / std::sqrt(double(key_dim_));
    Value context;
    // The fused op never forms the scores, at the price of recomputing them
    // in its gradient: it pays from sequences of 64 up; shorter ones run
    // faster as batched products. Dropout on the probabilities needs them
    // whole.
    const bool long_sequence = q.dim(1) * k.dim(1) >= kFusedAttentionScores;
    // keras/src/layers/attention/multi_head_attention.py,
    // _compute_attention_mask and _masked_softmax: the query's and the
    // value's masks exclude pairs, their scores moved by -1e9.
    const Value q_mask = t.mask(q_in), v_mask = t.mask(kv_in);
    Value adder;
    if (q_mask.valid() || v_mask.valid()) {
      const int64_t B = q.dim(0), Tq = q.dim(1), Tk = k.dim(1);
      Value pairs = ops::constant(t.graph(), {B, 1, Tq, Tk}, 1.0);
      if (q_mask.valid()) pairs = pairs * ops::reshape(q_mask, {B, 1, Tq, 1});
      if (v_mask.valid()) pairs = pairs * ops::reshape(v_mask, {B, 1, 1, Tk});
      adder = ops::scale(pairs - ops::constant(t.graph(), {}, 1.0), 1e9);
    }
    if (t.cached()) {  // generation: over the key-value cache
      AS_CHECK(o_.use_causal_mask_ && inputs.size() == 1, "MultiHeadAttention ", name(),
               ": only causal self-attention can generate over a key-value cache");
      context = t.causal_attention(q, k, v, scale);
    } else if ((t.training() && o_.dropout_ > 0) || !long_sequence || adder.valid() ||
               (o_.use_causal_mask_ && q.dim(1) != k.dim(1))) {
      Value scores = ops::scale(ops::einsum("bqhd,bkhd->bhqk", q, k), scale);
      if (adder.valid()) scores = scores + adder;
      // Keras's causal mask is top-left aligned (autoshard/nn/causal_softmax.h).
      Value probs =
          o_.use_causal_mask_ ? keras_causal_softmax(scores) : ops::softmax(scores, false);
      uint64_t key = stable_hash(t.path("attention_dropout").c_str()) + t.seed();
      probs = ops::dropout(probs, o_.dropout_, key);
      context = ops::einsum("bhqk,bkhd->bqhd", probs, v);
    } else {
      context = ops::attention(q, k, v, o_.use_causal_mask_, scale);
    }
    Trace::Scope scope(t, "attention_output");
    Value wo = t.weight("kernel", {heads_, value_dim_, q_in.dim(2)}, o_.output_kernel_initializer_);
    Value out = ops::einsum("bqhd,hdc->bqc", context, wo);
    if (o_.use_bias_) out = out + t.weight("bias", {q_in.dim(2)}, Initializer::zeros());
    return out;
  }
  // Keras's supports_masking: the output keeps the query's mask.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }
  LoraOptions lora_;

 private:
  int64_t heads_, key_dim_, value_dim_;
  MultiHeadAttentionOptions o_;
  std::unique_ptr<EinsumDense> query_, key_, value_;
};

// ---- Activation and Add ----
class ActivationImpl : public LayerImpl {
 public:
  ActivationImpl(std::string act, std::string name)
      : LayerImpl(layer_name_or_default(name, "activation")), act_(std::move(act)) {
    check_activation(act_);
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    return apply_activation(single(inputs, name()), act_);
  }
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  std::string act_;
};

class AddImpl : public LayerImpl {
 public:
  explicit AddImpl(std::string name) : LayerImpl(layer_name_or_default(name, "add")) {}
  Value call(Trace&, const std::vector<Value>& inputs) override {
    AS_CHECK(!inputs.empty(), "Add ", name(), " needs inputs");
    Value sum = inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) sum = sum + inputs[i];
    return sum;
  }
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return all_masks(t, inputs);
  }
};

}  // namespace

Dense::Dense(int64_t units, DenseOptions o)
    : Layer(std::make_shared<DenseImpl>(units, std::move(o))) {}
EinsumDense::EinsumDense(std::string eq, Shape out, EinsumDenseOptions o)
    : Layer(std::make_shared<EinsumDenseImpl>(std::move(eq), std::move(out), std::move(o))) {}
Embedding::Embedding(int64_t in, int64_t out, EmbeddingOptions o)
    : Layer(std::make_shared<EmbeddingImpl>(in, out, std::move(o))) {}
LayerNormalization::LayerNormalization(LayerNormalizationOptions o)
    : Layer(std::make_shared<LayerNormImpl>(std::move(o))) {}
MultiHeadAttention::MultiHeadAttention(int64_t heads, int64_t key_dim, MultiHeadAttentionOptions o)
    : Layer(std::make_shared<MultiHeadAttentionImpl>(heads, key_dim, std::move(o))) {}
Layer LoraMultiHeadAttention(int64_t heads, int64_t key_dim, MultiHeadAttentionOptions o,
                             LoraOptions lora) {
  auto impl = std::make_shared<MultiHeadAttentionImpl>(heads, key_dim, std::move(o));
  impl->lora_ = lora;
  return Layer(impl);
}
Dropout::Dropout(double rate, uint64_t seed, std::string name)
    : Layer(std::make_shared<DropoutImpl>(rate, seed, std::move(name))) {}
Activation::Activation(std::string act, std::string name)
    : Layer(std::make_shared<ActivationImpl>(std::move(act), std::move(name))) {}
Add::Add(std::string name) : Layer(std::make_shared<AddImpl>(std::move(name))) {}

}  // namespace autoshard
