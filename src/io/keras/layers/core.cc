// Keras's core, activation and regularization layers: Dense, Embedding,
// Masking, Activation, ReLU, LeakyReLU, ELU, Softmax, Dropout.
#include <functional>
#include <memory>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/masking.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// LeakyReLU and ELU with parameters other than apply_activation's defaults.
class KerasUnaryLayer : public LayerImpl {
 public:
  KerasUnaryLayer(std::string name, std::function<Value(Value)> f)
      : LayerImpl(std::move(name)), f_(std::move(f)) {}
  Value call(Trace&, const std::vector<Value>& in) override {
    AS_CHECK(in.size() == 1, "layer ", name(), " takes one input");
    return f_(in[0]);
  }
  Value compute_mask(Trace& t, const std::vector<Value>& in) override {
    return mask_of_first(t, in);  // activations support masking
  }

 private:
  std::function<Value(Value)> f_;
};

BuiltLayer keras_dense(LayerConfig& f) {
  const int64_t units = f.positive("units");
  const bool bias = f.boolean("use_bias", true);
  const std::string act = f.activation_name("activation");
  const DenseOptions o =
      DenseOptions()
          .kernel_initializer(f.initializer_or("kernel_initializer", Initializer::glorot_uniform()))
          .bias_initializer(f.initializer_or("bias_initializer", Initializer::zeros()));
  f.weight_extras({"kernel", "bias"});
  std::vector<std::string> w = {"kernel"};
  if (bias) w.push_back("bias");
  return {Dense(units, DenseOptions(o).activation(act).use_bias(bias).name(f.name())),
          plain_roles(w)};
}

BuiltLayer keras_embedding(LayerConfig& f) {
  const int64_t in = f.positive("input_dim"), dim = f.positive("output_dim");
  const bool mask_zero = f.boolean("mask_zero", false);
  if (mask_zero && in < 2) f.bad("input_dim", in, "must be at least 2 with mask_zero (id 0 pads)");
  const Initializer init =
      f.initializer_or("embeddings_initializer", Initializer::uniform(-0.05, 0.05));
  f.weight_extras({"embeddings"});
  return {Embedding(
              in, dim,
              EmbeddingOptions().mask_zero(mask_zero).embeddings_initializer(init).name(f.name())),
          plain_roles({"embeddings"})};
}

// keras/src/layers/core/masking.py: Masking(mask_value).
BuiltLayer keras_masking(LayerConfig& f) {
  return {Masking(f.number("mask_value", 0.0), f.name())};
}

BuiltLayer keras_relu(LayerConfig& f) {
  f.expect("threshold", 0.0);
  f.expect("negative_slope", 0.0);
  // Keras 2 and TF.js write "max_value": null for an unbounded ReLU (has()
  // treats null as absent; expect() marks it read).
  json max;
  if (f.has("max_value"))
    max = f.raw("max_value");
  else
    f.expect("max_value", nullptr);
  if (max.is_null()) return {Activation("relu", f.name())};
  if (max == json(6) || max == json(6.0)) return {Activation("relu6", f.name())};
  f.bad("max_value", max, "is not supported (none or 6)");
}

BuiltLayer keras_leaky_relu(LayerConfig& f) {
  const double slope = f.has("negative_slope")
                           ? f.number("negative_slope", 0.2)
                           : f.number("alpha", f.ctx().dialect == Dialect::Keras3 ? 0.2 : 0.3);
  return {Layer(std::make_shared<KerasUnaryLayer>(
      f.name(), [slope](Value x) { return ops::unary(x, UnaryFn::LeakyRelu, slope); }))};
}

BuiltLayer keras_elu(LayerConfig& f) {
  const double alpha = f.number("alpha", 1.0);
  return {Layer(std::make_shared<KerasUnaryLayer>(
      f.name(), [alpha](Value x) { return ops::unary(x, UnaryFn::Elu, alpha); }))};
}

BuiltLayer keras_dropout(LayerConfig& f) {
  const double rate = f.number("rate", 0);
  if (rate < 0 || rate >= 1) f.bad("rate", rate, "must be in [0, 1)");
  f.expect("noise_shape", nullptr, "is not supported (one mask element per element)");
  return {Dropout(rate, f.ctx().seed, f.name())};
}

}  // namespace

void add_core_layers(LayerTable& table) {
  table.add("Dense", keras_dense);
  table.add("Embedding", keras_embedding);
  table.add("Masking", keras_masking);
  table.add("Activation", [](LayerConfig& f) -> BuiltLayer {
    return {Activation(f.activation_name("activation"), f.name())};
  });
  table.add("ReLU", keras_relu);
  table.add("LeakyReLU", keras_leaky_relu);
  table.add("ELU", keras_elu);
  table.add("Softmax", [](LayerConfig& f) -> BuiltLayer {
    f.expect("axis", -1, "is not supported (the last axis only)");
    return {Activation("softmax", f.name())};
  });
  table.add("Dropout", keras_dropout);
  // Known to Keras, refused by name (one mask element per channel).
  for (const char* cls : {"SpatialDropout1D", "SpatialDropout2D"})
    table.add(cls,
              [](LayerConfig& f) -> BuiltLayer { f.bad("class", f.cls(), "is not supported"); });
}

}  // namespace autoshard::keras
