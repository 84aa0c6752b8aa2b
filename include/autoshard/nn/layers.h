// Keras-style layers. A Layer is a cheap handle (copies share one layer), so
// layers can be made inline: `Dense(64, DenseOptions().activation("relu"))(x)`.
// Calling a layer on a traced Value appends its ops to the Graph; calling it on
// a SymbolicTensor records the call for a functional Model.
//
// Weight paths are "<scope>.<layer name>.<weight>", with Keras weight names:
// Dense/EinsumDense "kernel" and "bias", Embedding "embeddings",
// LayerNormalization "gamma" and "beta", MultiHeadAttention sublayers "query",
// "key", "value" and "attention_output".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autoshard/nn/initializer.h"
#include "autoshard/nn/trace.h"

namespace autoshard {

class Layer;

// A placeholder in a functional model definition (Keras's KerasTensor). Shapes
// exclude the batch dimension.
class SymbolicTensor {
 public:
  struct Node;
  SymbolicTensor() = default;
  explicit SymbolicTensor(std::shared_ptr<const Node> node) : node_(std::move(node)) {}
  const Node& node() const { return *node_; }
  const Node* get() const { return node_.get(); }

 private:
  std::shared_ptr<const Node> node_;
};

// keras.Input: a model input with a per-example shape (no batch dimension).
SymbolicTensor Input(Shape shape, DType dtype = DType::F32, std::string name = "");

class LayerImpl {
 public:
  explicit LayerImpl(std::string name) : name_(std::move(name)) {}
  virtual ~LayerImpl() = default;
  const std::string& name() const { return name_; }
  virtual Value call(Trace& trace, const std::vector<Value>& inputs) = 0;
  // Keras's compute_mask (keras/src/layers/layer.py): the mask of the
  // (first) output from the inputs' masks (trace.mask). By default none: a
  // layer that does not support masking drops it, as Keras's does. A layer
  // that supports masking passes the first input's on (mask_of_first).
  virtual Value compute_mask(Trace& trace, const std::vector<Value>& inputs);
  // Layers of several outputs (a recurrent layer with return_state): how
  // many, and all of them (the first is call's).
  virtual int output_count() const { return 1; }
  virtual std::vector<Value> call_outputs(Trace& trace, const std::vector<Value>& inputs) {
    return {call(trace, inputs)};
  }

 protected:
  // Keras's supports_masking = True: the first input's mask passes on.
  static Value mask_of_first(const Trace& trace, const std::vector<Value>& inputs);

 private:
  std::string name_;
};

class Layer {
 public:
  explicit Layer(std::shared_ptr<LayerImpl> impl) : impl_(std::move(impl)) {}
  const std::string& name() const { return impl_->name(); }
  // Traces the layer under its own name scope.
  Value operator()(Trace& trace, Value x) const { return operator()(trace, std::vector<Value>{x}); }
  Value operator()(Trace& trace, const std::vector<Value>& inputs) const;
  // Records a call for a functional Model.
  SymbolicTensor operator()(const SymbolicTensor& x) const { return operator()(std::vector{x}); }
  SymbolicTensor operator()(const std::vector<SymbolicTensor>& inputs) const;
  // Every output of a layer of several outputs (output_count()), traced or
  // recorded; operator() gives the first.
  std::vector<Value> outputs(Trace& trace, const std::vector<Value>& inputs) const;
  std::vector<SymbolicTensor> outputs(const std::vector<SymbolicTensor>& inputs) const;
  int output_count() const { return impl_->output_count(); }

 private:
  std::shared_ptr<LayerImpl> impl_;
};

struct SymbolicTensor::Node {
  // Releases the nodes only this one holds without recursing: a chain of
  // 50,000 layers would otherwise free itself 50,000 frames deep.
  ~Node();
  std::vector<SymbolicTensor> inputs;
  std::shared_ptr<Layer> layer;  // null for an Input
  // Output `output` of the layer's call; for output > 0, inputs holds the
  // node of output 0 (the call itself) only.
  int output = 0;
  Shape shape;  // Inputs only
  DType dtype = DType::F32;
  std::string name;
};

// A unique default layer name of the Keras form "dense", "dense_1", ...
std::string default_layer_name(const std::string& base);

// `given`, or a unique default name from `base` when `given` is empty.
std::string layer_name_or_default(const std::string& given, const std::string& base);

// Applies a Keras 3 activation by name, with Keras's defaults: "linear" (or
// ""), "relu", "relu6", "leaky_relu" (negative slope 0.2), "elu" (alpha 1),
// "selu", "gelu" (exact), "gelu_tanh" (and "gelu_new"), "sigmoid",
// "hard_sigmoid" (relu6(x + 3) / 6), "hard_silu" ("hard_swish"), "tanh",
// "softmax" and "log_softmax" (last axis), "silu" ("swish"), "softplus",
// "softsign", "mish", "exponential".
Value apply_activation(Value x, const std::string& activation);
// Throws a clear error for an activation name apply_activation does not know.
void check_activation(const std::string& activation);

#define AUTOSHARD_OPTION(Type, field, init) \
  Type field##_ = init;                     \
  auto& field(Type v) {                     \
    field##_ = std::move(v);                \
    return *this;                           \
  }

struct DenseOptions {
  AUTOSHARD_OPTION(std::string, activation, "")
  AUTOSHARD_OPTION(bool, use_bias, true)
  AUTOSHARD_OPTION(Initializer, kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(Initializer, bias_initializer, Initializer::zeros())
  AUTOSHARD_OPTION(std::string, name, "")
};

// y = activation(x @ kernel + bias) over the last axis; kernel [in, units].
class Dense : public Layer {
 public:
  explicit Dense(int64_t units, DenseOptions options = {});
};

struct EinsumDenseOptions {
  AUTOSHARD_OPTION(std::string, bias_axes, "")
  AUTOSHARD_OPTION(std::string, activation, "")
  AUTOSHARD_OPTION(Initializer, kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(Initializer, bias_initializer, Initializer::zeros())
  AUTOSHARD_OPTION(std::string, name, "")
};

// keras.layers.EinsumDense: y = einsum(equation, x, kernel) (+ bias over
// `bias_axes`). `output_shape` gives the output dims after the first (batch)
// one; the kernel's dims come from the input or from output_shape.
class EinsumDense : public Layer {
 public:
  EinsumDense(std::string equation, Shape output_shape, EinsumDenseOptions options = {});
};

struct EmbeddingOptions {
  AUTOSHARD_OPTION(Initializer, embeddings_initializer, Initializer::uniform(-0.05, 0.05))
  // Keras's mask_zero: id 0 is padding; the output's mask is ids != 0
  // (Trace::mask), so input_dim counts the padding id too.
  AUTOSHARD_OPTION(bool, mask_zero, false)
  AUTOSHARD_OPTION(std::string, name, "")
};

// Looks up rows of embeddings [input_dim, output_dim] for i32 ids.
class Embedding : public Layer {
 public:
  Embedding(int64_t input_dim, int64_t output_dim, EmbeddingOptions options = {});
};

struct LayerNormalizationOptions {
  AUTOSHARD_OPTION(double, epsilon, 1e-3)
  AUTOSHARD_OPTION(bool, center, true)
  AUTOSHARD_OPTION(bool, scale, true)
  // RMSNorm (Keras's rms_scaling): x / sqrt(mean(x^2) + epsilon) * gamma;
  // center and scale are ignored.
  AUTOSHARD_OPTION(bool, rms_scaling, false)
  // RMSNorm's scale is gamma_offset + gamma, gamma starting at 0 when the
  // offset is not (Gemma's RMSNorm: 1 + gamma).
  AUTOSHARD_OPTION(double, gamma_offset, 0.0)
  AUTOSHARD_OPTION(std::string, name, "")
};

// Normalises over the last axis, then gamma * x + beta.
class LayerNormalization : public Layer {
 public:
  explicit LayerNormalization(LayerNormalizationOptions options = {});
};

struct MultiHeadAttentionOptions {
  AUTOSHARD_OPTION(int64_t, value_dim, 0)  // 0: same as key_dim
  AUTOSHARD_OPTION(double, dropout, 0.0)
  AUTOSHARD_OPTION(bool, use_bias, true)
  // The key bias adds the same q.b to every score of a query, which softmax
  // ignores: its exact gradient is zero and Adam turns its rounding noise into
  // full-size steps. false drops it (GPT-2 does; see docs/weights.md).
  AUTOSHARD_OPTION(bool, key_bias, true)
  AUTOSHARD_OPTION(bool, use_causal_mask, false)
  AUTOSHARD_OPTION(Initializer, kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(Initializer, output_kernel_initializer, Initializer::glorot_uniform())
  AUTOSHARD_OPTION(std::string, name, "")
};

// Self-attention over [batch, time, features] (one input) or attention of a
// query over a value sequence (two inputs: query, value). Heads are their own
// kernel axis: query.kernel is [features, num_heads, key_dim].
class MultiHeadAttention : public Layer {
 public:
  MultiHeadAttention(int64_t num_heads, int64_t key_dim, MultiHeadAttentionOptions options = {});
};

// Zeroes elements with probability `rate` while training and scales the rest
// by 1 / (1 - rate); the mask is keyed by (seed, step, element index).
class Dropout : public Layer {
 public:
  explicit Dropout(double rate, uint64_t seed = 0, std::string name = "");
};

// An activation function as a layer (any name apply_activation knows).
class Activation : public Layer {
 public:
  explicit Activation(std::string activation, std::string name = "");
};

// Elementwise sum of its inputs (residual connections in functional models).
class Add : public Layer {
 public:
  explicit Add(std::string name = "");
};

}  // namespace autoshard
