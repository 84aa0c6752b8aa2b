#include "io/keras/layer_factory.h"

#include <climits>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/json.h"
#include "autoshard/nn/conv_layers.h"
#include "autoshard/nn/merge_layers.h"
#include "autoshard/nn/normalization_layers.h"
#include "autoshard/nn/pooling_layers.h"
#include "autoshard/nn/recurrent_layers.h"
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/nn/spatial_layers.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// Reads a layer's config: every field must be read, checked or known to be
// harmless before finish(), which names any field left over.
class Fields {
 public:
  Fields(const LayerSpec& spec, const BuildContext& ctx)
      : c_(spec.config), layer_(shown_name(spec.name)), cls_(shown_name(spec.cls)), ctx_(ctx) {
    AS_CHECK(c_.is_object(), ctx.where, ": layer '", layer_, "' (", cls_,
             "): config must be an object");
    for (const char* k : {"name", "batch_input_shape", "batch_shape", "input_shape", "input_dim",
                          "build_config", "input_length", "implementation", "unroll", "seed",
                          "zero_output_for_mask", "sparse", "ragged", "module"})
      used_.insert(k);
    check_common();
  }

  // "FILE: layer 'NAME' (CLASS): field 'FIELD'", the start of a message.
  std::string at(const std::string& field) const {
    return cat(ctx_.where, ": layer '", layer_, "' (", cls_, "): field '", field, "'");
  }
  [[noreturn]] void bad(const std::string& field, const json& value, const std::string& why) const {
    fail(ctx_.where, ": layer '", layer_, "' (", cls_, "): field '", field,
         "' = ", value.dump().substr(0, 200), " ", why);
  }
  const std::string& layer() const { return layer_; }
  bool has(const std::string& k) const { return c_.contains(k) && !c_.at(k).is_null(); }
  const json& raw(const std::string& k) {
    used_.insert(k);
    return c_.at(k);
  }

  int64_t integer(const std::string& k, std::optional<int64_t> def = std::nullopt) {
    used_.insert(k);
    if (!has(k)) {
      if (def) return *def;
      fail(ctx_.where, ": layer '", layer_, "' (", cls_, ") has no field '", k, "'");
    }
    const json& v = c_.at(k);
    // A whole float (3.0) counts; one past int64's range is not cast.
    if (v.is_number_float() && std::abs(v.get<double>()) < 9.0e18 &&
        v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>())))
      return static_cast<int64_t>(v.get<double>());
    if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX})
      bad(k, v, "is out of range");
    if (!v.is_number_integer()) bad(k, v, "must be a whole number");
    return v.get<int64_t>();
  }
  int64_t positive(const std::string& k, std::optional<int64_t> def = std::nullopt) {
    const int64_t v = integer(k, def);
    if (v <= 0 || v > (1LL << 31)) bad(k, c_.at(k), "must be a positive size");
    return v;
  }
  double number(const std::string& k, double def) {
    used_.insert(k);
    if (!has(k)) return def;
    const json& v = c_.at(k);
    if (!v.is_number()) bad(k, v, "must be a number");
    return v.get<double>();
  }
  // A normalisation's epsilon (Keras's default 1e-3): above 0, as it keeps
  // 1 / sqrt(variance + epsilon) finite; a negative one makes NaN.
  double epsilon() {
    const double eps = number("epsilon", 1e-3);
    if (!(eps > 0))
      bad("epsilon", c_.at("epsilon"), "must be above 0 (it keeps the normalisation finite)");
    return eps;
  }
  bool boolean(const std::string& k, bool def) {
    used_.insert(k);
    if (!has(k)) return def;
    const json& v = c_.at(k);
    if (!v.is_boolean()) bad(k, v, "must be true or false");
    return v.get<bool>();
  }
  std::string string(const std::string& k, const std::string& def) {
    used_.insert(k);
    if (!has(k)) return def;
    const json& v = c_.at(k);
    if (!v.is_string()) bad(k, v, "must be a string");
    return v.get<std::string>();
  }
  // An int or a list of `n` ints (Keras's kernel_size, strides, ...).
  std::vector<int64_t> sizes(const std::string& k, size_t n, std::vector<int64_t> def) {
    used_.insert(k);
    if (!has(k)) return def;
    const json& v = c_.at(k);
    std::vector<int64_t> out;
    if (v.is_number_integer()) {
      out.assign(n, v.get<int64_t>());
    } else if (v.is_array() && v.size() == n) {
      for (const json& e : v) {
        if (!e.is_number_integer()) bad(k, v, "must be whole numbers");
        out.push_back(e.get<int64_t>());
      }
    } else {
      bad(k, v, "must be a whole number or a list of " + std::to_string(n));
    }
    for (int64_t x : out)
      if (x <= 0 || x > (1 << 20)) bad(k, v, "must be positive sizes");
    return out;
  }
  // The field must hold `expected` (or be absent).
  void expect(const std::string& k, const json& expected, const std::string& why = "") {
    used_.insert(k);
    if (!c_.contains(k)) return;
    const json& v = c_.at(k);
    if (v == expected) return;
    if (v.is_null() && (expected.is_null() || expected == json(false))) return;
    if (v.is_number() && expected.is_number() && v.get<double>() == expected.get<double>()) return;
    bad(k, v, why.empty() ? "is not supported (only " + expected.dump() + ")" : why);
  }
  // Fields that change only training (regularizers, constraints).
  void training_only(const std::string& k) {
    used_.insert(k);
    if (!has(k) || ctx_.inference) return;
    bad(k, c_.at(k),
        "is not supported for training (regularizers and constraints are not implemented); "
        "predict and evaluate accept it");
  }
  void initializer(const std::string& k) { used_.insert(k); }
  void activation(const std::string& k) { used_.insert(k); }
  std::string activation_name(const std::string& k, const std::string& def = "linear") {
    used_.insert(k);
    if (!c_.contains(k)) return def == "linear" ? "" : def;
    return activation_of(c_.at(k), layer_, k, ctx_);
  }
  void channels_last() {
    expect("data_format", "channels_last",
           "is not supported (autoshard's layers are channels_last)");
  }
  void finish() const {
    for (const auto& [k, v] : c_.items())
      if (!used_.count(k))
        fail(ctx_.where, ": layer '", layer_, "' (", cls_, "): field '", k,
             "' = ", v.dump().substr(0, 200), " is not supported");
  }

 private:
  void check_common() {
    used_.insert("dtype");
    if (c_.contains("dtype") && !c_.at("dtype").is_null()) {
      const json& d = c_.at("dtype");
      std::string name = d.is_string() ? d.get<std::string>() : "";
      if (d.is_object() && d.contains("config") && d.at("config").is_object())
        name = json_string_or(d.at("config"), "name", "", at("dtype.config"));
      if (name != "float32") bad("dtype", d, "is not supported (float32 only)");
    }
    used_.insert("trainable");
    if (c_.contains("trainable") && c_.at("trainable") == json(false) && !ctx_.inference)
      bad("trainable", false, "(a frozen layer) is not supported for training");
    training_only("activity_regularizer");
  }

  const json& c_;
  std::string layer_, cls_;  // as messages show them (escaped, long ones cut)
  const BuildContext& ctx_;
  std::set<std::string> used_;
};

void dense_like_extras(Fields& f, const std::vector<std::string>& weights) {
  for (const std::string& w : weights) {
    f.initializer(w + "_initializer");
    f.training_only(w + "_regularizer");
    f.training_only(w + "_constraint");
  }
  f.expect("lora_rank", nullptr);
  f.expect("lora_alpha", nullptr, "is not supported (LoRA)");
  f.expect("quantization_config", nullptr);
}

std::vector<WeightRole> plain_roles(const std::vector<std::string>& names,
                                    const std::string& k3_group = "",
                                    const std::string& tfjs_prefix = "") {
  std::vector<WeightRole> roles;
  for (size_t i = 0; i < names.size(); ++i)
    roles.push_back({names[i], k3_group + "vars/" + std::to_string(i), tfjs_prefix + names[i]});
  return roles;
}

// LeakyReLU, ReLU and ELU with parameters other than apply_activation's defaults.
class UnaryLayer : public LayerImpl {
 public:
  UnaryLayer(std::string name, std::function<Value(Value)> f)
      : LayerImpl(std::move(name)), f_(std::move(f)) {}
  Value call(Trace&, const std::vector<Value>& in) override {
    AS_CHECK(in.size() == 1, "layer ", name(), " takes one input");
    return f_(in[0]);
  }

 private:
  std::function<Value(Value)> f_;
};

// A nested Sequential or Functional model of one input and one output,
// traced under its own name scope.
class NestedModel : public LayerImpl {
 public:
  struct Step {
    Layer layer;
    std::vector<TensorRef> inputs;
    std::string name;
  };
  NestedModel(std::string name, std::vector<std::string> inputs, std::vector<Step> steps,
              std::vector<TensorRef> outputs)
      : LayerImpl(std::move(name)),
        inputs_(std::move(inputs)),
        steps_(std::move(steps)),
        outputs_(std::move(outputs)) {}
  Value call(Trace& trace, const std::vector<Value>& in) override {
    AS_CHECK(in.size() == inputs_.size(), "nested model ", name(), " takes ", inputs_.size(),
             " inputs, got ", in.size());
    std::map<std::string, Value> values;
    std::map<std::string, int> calls;
    for (size_t i = 0; i < in.size(); ++i) values[inputs_[i] + ":0"] = in[i];
    for (const Step& s : steps_) {
      std::vector<Value> args;
      for (const TensorRef& r : s.inputs) args.push_back(values.at(key(r)));
      const int k = calls[s.name]++;
      values[s.name + ":" + std::to_string(k)] = s.layer(trace, args);
    }
    return values.at(key(outputs_.at(0)));
  }
  static std::string key(const TensorRef& r) { return r.layer + ":" + std::to_string(r.node); }

 private:
  std::vector<std::string> inputs_;
  std::vector<Step> steps_;
  std::vector<TensorRef> outputs_;
};

// Keras 3 always writes Bidirectional's backward_layer: the forward layer's
// copy with go_backwards flipped (and its own name). That one is what the
// C++ Bidirectional builds; a backward layer configured otherwise is not.
void check_backward_layer(Fields& f, const json& forward, const json& backward) {
  auto core = [](const json& layer) {
    json c = layer.is_object() ? layer.value("config", json::object()) : json();
    if (c.is_object())
      for (const char* k : {"name", "go_backwards"}) c.erase(k);
    return c;
  };
  const json fc = forward.value("config", json::object());
  const json bc = backward.is_object() ? backward.value("config", json::object()) : json();
  // Compared as JSON values: a class_name of another type is simply another class.
  const bool same_class = backward.is_object() && backward.contains("class_name") &&
                          backward.at("class_name") == forward.at("class_name");
  const bool flipped =
      bc.is_object() && json_bool_or(bc, "go_backwards", false, f.at("backward_layer.config")) !=
                            json_bool_or(fc, "go_backwards", false, f.at("layer.config"));
  if (!same_class || !flipped || core(forward) != core(backward)) {
    std::string field = !same_class ? "class_name" : !flipped ? "go_backwards" : "";
    const json fcore = core(forward), bcore = core(backward);
    if (field.empty() && bcore.is_object() && fcore.is_object())
      for (const auto& [k, v] : bcore.items())
        if (fcore.value(k, json()) != v) {
          field = k;
          break;
        }
    if (field.empty()) field = "a field the forward layer has";
    f.bad("backward_layer", backward.is_object() ? backward.value("class_name", json()) : backward,
          "differs from the forward layer in '" + field +
              "'; only the forward layer's mirror (go_backwards flipped) is supported");
  }
}

RecurrentLayer build_rnn(const LayerSpec& spec, const BuildContext& ctx, std::string name,
                         std::vector<WeightRole>& roles, const std::string& k3_prefix,
                         const std::string& tfjs_prefix) {
  Fields f(spec, ctx);
  const int64_t units = f.positive("units");
  const bool use_bias = f.boolean("use_bias", true);
  const std::string activation = f.activation_name("activation", "tanh");
  const double dropout = f.number("dropout", 0),
               recurrent_dropout = f.number("recurrent_dropout", 0);
  if (dropout < 0 || dropout >= 1) f.bad("dropout", dropout, "must be in [0, 1)");
  if (recurrent_dropout < 0 || recurrent_dropout >= 1)
    f.bad("recurrent_dropout", recurrent_dropout, "must be in [0, 1)");
  const bool return_sequences = f.boolean("return_sequences", false);
  if (f.boolean("return_state", false))
    f.bad("return_state", true, "is not supported yet (a layer of several outputs)");
  const bool go_backwards = f.boolean("go_backwards", false);
  f.expect("stateful", false, "is not supported (state kept between batches)");
  dense_like_extras(f, {"kernel", "recurrent", "bias"});
  std::vector<std::string> names = {"kernel", "recurrent_kernel"};
  if (use_bias) names.push_back("bias");
  std::optional<RecurrentLayer> layer;
  if (spec.cls == "LSTM") {
    const std::string recurrent = f.activation_name(
        "recurrent_activation", ctx.dialect == Dialect::Keras3 ? "sigmoid" : "hard_sigmoid");
    const bool forget = f.boolean("unit_forget_bias", true);
    layer = LSTM(units, LSTMOptions()
                            .activation(activation)
                            .recurrent_activation(recurrent)
                            .use_bias(use_bias)
                            .unit_forget_bias(forget)
                            .dropout(dropout)
                            .recurrent_dropout(recurrent_dropout)
                            .seed(ctx.seed)
                            .return_sequences(return_sequences)
                            .go_backwards(go_backwards)
                            .name(name));
  } else if (spec.cls == "GRU") {
    const std::string recurrent = f.activation_name(
        "recurrent_activation", ctx.dialect == Dialect::Keras3 ? "sigmoid" : "hard_sigmoid");
    const bool reset_after = f.boolean("reset_after", ctx.dialect != Dialect::TFJS);
    layer = GRU(units, GRUOptions()
                           .activation(activation)
                           .recurrent_activation(recurrent)
                           .use_bias(use_bias)
                           .reset_after(reset_after)
                           .dropout(dropout)
                           .recurrent_dropout(recurrent_dropout)
                           .seed(ctx.seed)
                           .return_sequences(return_sequences)
                           .go_backwards(go_backwards)
                           .name(name));
  } else {
    layer = SimpleRNN(units, SimpleRNNOptions()
                                 .activation(activation)
                                 .use_bias(use_bias)
                                 .dropout(dropout)
                                 .recurrent_dropout(recurrent_dropout)
                                 .seed(ctx.seed)
                                 .return_sequences(return_sequences)
                                 .go_backwards(go_backwards)
                                 .name(name));
  }
  f.finish();
  for (size_t i = 0; i < names.size(); ++i)
    roles.push_back(
        {names[i], k3_prefix + "cell/vars/" + std::to_string(i), tfjs_prefix + names[i]});
  return *layer;
}

}  // namespace

std::string activation_of(const json& value, const std::string& layer, const std::string& field,
                          const BuildContext& ctx) {
  std::string name;
  if (value.is_null()) return "";
  if (value.is_string()) {
    name = value.get<std::string>();
  } else if (value.is_object() && value.contains("class_name") &&
             value.at("class_name") == "function" && value.contains("config") &&
             value.at("config").is_string() &&
             (!json_member(value, "module") || value.at("module") == "keras.activations")) {
    name = value.at("config").get<std::string>();
  } else {
    fail(ctx.where, ": layer '", layer, "': field '", field, "' = ", value.dump().substr(0, 200),
         " is not a built-in activation (custom functions are code and are not run)");
  }
  if (name == "linear" || name.empty()) return "";
  if (name == "hard_sigmoid" && ctx.dialect != Dialect::Keras3)
    fail(ctx.where, ": layer '", layer, "': field '", field,
         "' = \"hard_sigmoid\" is Keras 2's and TensorFlow.js's clip(0.2 x + 0.5, 0, 1), which "
         "autoshard does not have (it has Keras 3's relu6(x + 3) / 6)");
  if (name == "gelu" && ctx.dialect == Dialect::TFJS) name = "gelu";
  if (name == "gelu_new") name = "gelu_tanh";
  if (name == "swish") name = "silu";
  try {
    check_activation(name);
  } catch (const Error&) {
    fail(ctx.where, ": layer '", layer, "': field '", field, "' = \"", name,
         "\" is not an activation autoshard has");
  }
  return name;
}

BuiltLayer build_layer(const LayerSpec& spec, const BuildContext& ctx) {
  const std::string& cls = spec.cls;
  const std::string& name = spec.name;
  if (spec.nested) {
    const ModelSpec& m = *spec.nested;
    AS_CHECK(m.outputs.size() == 1, ctx.where, ": nested model '", name, "' has ", m.outputs.size(),
             " outputs; nested models of one output are supported");
    std::vector<NestedModel::Step> steps;
    std::vector<WeightRole> roles;
    std::vector<std::string> inputs;
    for (const InputLayerSpec& in : m.inputs) inputs.push_back(in.name);
    // Calls in dependency order (the config lists them so for Keras).
    for (const LayerSpec& l : m.layers) {
      BuiltLayer b = build_layer(l, ctx);
      for (const WeightRole& r : b.weights)
        roles.push_back({l.name + "." + r.cpp, l.saved_group + "/" + r.k3, l.name + "/" + r.tfjs});
      AS_CHECK(l.calls.size() == 1, ctx.where, ": layer '", l.name, "' inside nested model '", name,
               "' is called ", l.calls.size(), " times; once is supported");
      steps.push_back({b.layer, l.calls[0], l.name});
    }
    return {Layer(std::make_shared<NestedModel>(name, inputs, steps, m.outputs)), roles};
  }
  if (cls == "LSTM" || cls == "GRU" || cls == "SimpleRNN") {
    std::vector<WeightRole> roles;
    return {build_rnn(spec, ctx, name, roles, "", ""), roles};
  }
  Fields f(spec, ctx);
  auto done = [&](Layer layer, std::vector<WeightRole> roles = {}) {
    f.finish();
    return BuiltLayer{std::move(layer), std::move(roles)};
  };
  if (cls == "Dense") {
    const int64_t units = f.positive("units");
    const bool bias = f.boolean("use_bias", true);
    const std::string act = f.activation_name("activation");
    dense_like_extras(f, {"kernel", "bias"});
    std::vector<std::string> w = {"kernel"};
    if (bias) w.push_back("bias");
    return done(Dense(units, DenseOptions().activation(act).use_bias(bias).name(name)),
                plain_roles(w));
  }
  if (cls == "Activation") return done(Activation(f.activation_name("activation"), name));
  if (cls == "ReLU" || cls == "LeakyReLU" || cls == "ELU" || cls == "Softmax") {
    if (cls == "Softmax") {
      f.expect("axis", -1, "is not supported (the last axis only)");
      return done(Activation("softmax", name));
    }
    if (cls == "ELU") {
      const double alpha = f.number("alpha", 1.0);
      return done(Layer(std::make_shared<UnaryLayer>(
          name, [alpha](Value x) { return ops::unary(x, UnaryFn::Elu, alpha); })));
    }
    if (cls == "LeakyReLU") {
      const double slope = f.has("negative_slope")
                               ? f.number("negative_slope", 0.2)
                               : f.number("alpha", ctx.dialect == Dialect::Keras3 ? 0.2 : 0.3);
      return done(Layer(std::make_shared<UnaryLayer>(
          name, [slope](Value x) { return ops::unary(x, UnaryFn::LeakyRelu, slope); })));
    }
    f.expect("threshold", 0.0);
    f.expect("negative_slope", 0.0);
    const json max = f.has("max_value") ? f.raw("max_value") : json();
    if (max.is_null()) return done(Activation("relu", name));
    if (max == json(6) || max == json(6.0)) return done(Activation("relu6", name));
    f.bad("max_value", max, "is not supported (none or 6)");
  }
  if (cls == "Dropout" || cls == "SpatialDropout1D" || cls == "SpatialDropout2D") {
    if (cls != "Dropout") f.bad("class", cls, "is not supported");
    const double rate = f.number("rate", 0);
    if (rate < 0 || rate >= 1) f.bad("rate", rate, "must be in [0, 1)");
    f.expect("noise_shape", nullptr, "is not supported (one mask element per element)");
    return done(Dropout(rate, ctx.seed, name));
  }
  if (cls == "Conv1D" || cls == "Conv2D" || cls == "Conv2DTranspose" || cls == "DepthwiseConv2D" ||
      cls == "SeparableConv2D") {
    const size_t rank = cls == "Conv1D" ? 1 : 2;
    f.channels_last();
    ConvOptions o;
    o.strides(f.sizes("strides", rank, std::vector<int64_t>(rank, 1)));
    const std::string padding = f.string("padding", "valid");
    if (padding != "valid" && padding != "same" && !(padding == "causal" && rank == 1))
      f.bad("padding", padding, "is not supported (valid or same; causal for Conv1D)");
    o.padding(padding);
    o.dilation_rate(f.sizes("dilation_rate", rank, std::vector<int64_t>(rank, 1)));
    o.activation(f.activation_name("activation"));
    const bool bias = f.boolean("use_bias", true);
    o.use_bias(bias).name(name);
    const std::vector<int64_t> kernel = f.sizes("kernel_size", rank, {});
    if (kernel.empty()) f.bad("kernel_size", nullptr, "is required");
    dense_like_extras(f, {"kernel", "bias", "depthwise", "pointwise"});
    std::vector<WeightRole> roles;
    auto add = [&](const std::string& cpp, const std::string& tfjs) {
      roles.push_back({cpp, "vars/" + std::to_string(roles.size()), tfjs});
    };
    if (cls == "Conv1D" || cls == "Conv2D") {
      o.groups(f.positive("groups", 1));
      const int64_t filters = f.positive("filters");
      add("kernel", "kernel");
      if (bias) add("bias", "bias");
      if (rank == 1) return done(Conv1D(filters, kernel[0], o), roles);
      return done(Conv2D(filters, kernel, o), roles);
    }
    if (cls == "Conv2DTranspose") {
      f.expect("output_padding", nullptr, "is not supported");
      f.expect("groups", 1);
      const int64_t filters = f.positive("filters");
      add("kernel", "kernel");
      if (bias) add("bias", "bias");
      return done(Conv2DTranspose(filters, kernel, o), roles);
    }
    o.depth_multiplier(f.positive("depth_multiplier", 1));
    if (cls == "DepthwiseConv2D") {
      f.expect("filters", nullptr);
      add("kernel", "depthwise_kernel");
      if (bias) add("bias", "bias");
      return done(DepthwiseConv2D(kernel, o), roles);
    }
    const int64_t filters = f.positive("filters");
    add("depthwise_kernel", "depthwise_kernel");
    add("pointwise_kernel", "pointwise_kernel");
    if (bias) add("bias", "bias");
    return done(SeparableConv2D(filters, kernel, o), roles);
  }
  if (cls == "MaxPooling1D" || cls == "MaxPooling2D" || cls == "AveragePooling1D" ||
      cls == "AveragePooling2D") {
    const size_t rank = cls.back() == '1' || cls.find("1D") != std::string::npos ? 1 : 2;
    f.channels_last();
    PoolingOptions o;
    o.pool_size(f.sizes("pool_size", rank, std::vector<int64_t>(rank, 2)));
    o.strides(f.sizes("strides", rank, o.pool_size_));
    const std::string padding = f.string("padding", "valid");
    if (padding != "valid" && padding != "same") f.bad("padding", padding, "is not supported");
    o.padding(padding).name(name);
    if (cls == "MaxPooling1D") return done(MaxPooling1D(o));
    if (cls == "MaxPooling2D") return done(MaxPooling2D(o));
    if (cls == "AveragePooling1D") return done(AveragePooling1D(o));
    return done(AveragePooling2D(o));
  }
  if (cls.rfind("Global", 0) == 0 &&
      (cls.find("Pooling1D") != std::string::npos || cls.find("Pooling2D") != std::string::npos)) {
    f.channels_last();
    GlobalPoolingOptions o;
    o.keepdims(f.boolean("keepdims", false)).name(name);
    if (cls == "GlobalAveragePooling1D") return done(GlobalAveragePooling1D(o));
    if (cls == "GlobalAveragePooling2D") return done(GlobalAveragePooling2D(o));
    if (cls == "GlobalMaxPooling1D") return done(GlobalMaxPooling1D(o));
    if (cls == "GlobalMaxPooling2D") return done(GlobalMaxPooling2D(o));
  }
  if (cls == "ZeroPadding2D" || cls == "Cropping2D") {
    f.channels_last();
    const char* key = cls == "ZeroPadding2D" ? "padding" : "cropping";
    std::vector<int64_t> amounts;
    const json v = f.has(key) ? f.raw(key) : json(cls == "ZeroPadding2D" ? 1 : 0);
    auto whole = [&](const json& e) {
      if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > (1 << 20))
        f.bad(key, v, "must be sizes >= 0");
      return e.get<int64_t>();
    };
    if (v.is_number_integer()) {
      amounts = {whole(v)};
    } else if (v.is_array() && v.size() == 2 && v[0].is_array()) {
      for (const json& pair : v) {
        if (!pair.is_array() || pair.size() != 2)
          f.bad(key, v, "must be ((top, bottom), (left, right))");
        amounts.push_back(whole(pair[0]));
        amounts.push_back(whole(pair[1]));
      }
    } else if (v.is_array() && v.size() == 2) {
      amounts = {whole(v[0]), whole(v[1])};
    } else {
      f.bad(key, v, "is not an int, a pair or a pair of pairs");
    }
    if (cls == "ZeroPadding2D") return done(ZeroPadding2D(amounts, name));
    return done(Cropping2D(amounts, name));
  }
  if (cls == "UpSampling2D") {
    f.channels_last();
    const std::string interpolation = f.string("interpolation", "nearest");
    if (interpolation != "nearest")
      f.bad("interpolation", interpolation, "is not supported (nearest)");
    return done(UpSampling2D(f.sizes("size", 2, {2, 2}), interpolation, name));
  }
  if (cls == "Flatten") {
    f.channels_last();
    return done(Flatten(name));
  }
  if (cls == "Reshape") {
    const json& t = f.raw("target_shape");
    Shape shape;
    if (!t.is_array()) f.bad("target_shape", t, "must be a list");
    for (const json& d : t) {
      if (!d.is_number_integer() || d.get<int64_t>() < -1 || d.get<int64_t>() == 0)
        f.bad("target_shape", t, "must be positive sizes (one may be -1)");
      shape.push_back(d.get<int64_t>());
    }
    return done(Reshape(shape, name));
  }
  if (cls == "Permute") {
    const json& d = f.raw("dims");
    std::vector<int64_t> dims;
    if (!d.is_array()) f.bad("dims", d, "must be a list");
    for (const json& e : d) {
      if (!e.is_number_integer()) f.bad("dims", d, "must be whole numbers");
      dims.push_back(e.get<int64_t>());
    }
    return done(Permute(dims, name));
  }
  if (cls == "RepeatVector") return done(RepeatVector(f.positive("n"), name));
  if (cls == "Rescaling") {
    const json s = f.has("scale") ? f.raw("scale") : json(1.0);
    const json o = f.has("offset") ? f.raw("offset") : json(0.0);
    if (!s.is_number()) f.bad("scale", s, "is not supported (one number)");
    if (!o.is_number()) f.bad("offset", o, "is not supported (one number)");
    return done(Rescaling(s.get<double>(), o.get<double>(), name));
  }
  if (cls == "Embedding") {
    const int64_t in = f.positive("input_dim"), dim = f.positive("output_dim");
    f.expect("mask_zero", false, "is not supported (masking)");
    dense_like_extras(f, {"embeddings"});
    return done(Embedding(in, dim, EmbeddingOptions().name(name)), plain_roles({"embeddings"}));
  }
  if (cls == "BatchNormalization") {
    const json axis = f.has("axis") ? f.raw("axis") : json(-1);
    int64_t a = -1;
    if (axis.is_array() && axis.size() == 1 && axis[0].is_number_integer())
      a = axis[0].get<int64_t>();
    else if (axis.is_number_integer())
      a = axis.get<int64_t>();
    else
      f.bad("axis", axis, "is not supported (one axis)");
    BatchNormalizationOptions o;
    o.axis(a).momentum(f.number("momentum", 0.99)).epsilon(f.epsilon());
    const bool center = f.boolean("center", true), scale = f.boolean("scale", true);
    o.center(center).scale(scale).name(name);
    f.expect("synchronized", false);
    f.expect("renorm", false, "is not supported");
    f.expect("renorm_clipping", nullptr);
    f.expect("renorm_momentum", 0.99);
    f.expect("fused", nullptr);
    f.expect("virtual_batch_size", nullptr, "is not supported");
    f.expect("adjustment", nullptr, "is not supported");
    dense_like_extras(f, {"beta", "gamma", "moving_mean", "moving_variance"});
    std::vector<std::string> w;
    if (scale) w.push_back("gamma");
    if (center) w.push_back("beta");
    w.push_back("moving_mean");
    w.push_back("moving_variance");
    return done(BatchNormalization(o), plain_roles(w));
  }
  if (cls == "GroupNormalization" || cls == "LayerNormalization") {
    const json axis = f.has("axis") ? f.raw("axis") : json(-1);
    if (!(axis == json(-1) || axis == json::array({-1})))
      f.bad("axis", axis, "is not supported (the last axis, -1)");
    const double eps = f.epsilon();
    const bool center = f.boolean("center", true), scale = f.boolean("scale", true);
    dense_like_extras(f, {"beta", "gamma"});
    std::vector<std::string> w;
    if (scale) w.push_back("gamma");
    if (center) w.push_back("beta");
    if (cls == "GroupNormalization") {
      GroupNormalizationOptions o;
      o.groups(f.positive("groups", 32)).epsilon(eps).center(center).scale(scale).name(name);
      return done(GroupNormalization(o), plain_roles(w));
    }
    const bool rms = f.boolean("rms_scaling", false);
    LayerNormalizationOptions o;
    o.epsilon(eps).center(center).scale(scale).rms_scaling(rms).name(name);
    if (rms) w = {"gamma"};
    return done(LayerNormalization(o), plain_roles(w));
  }
  if (cls == "Add" || cls == "Subtract" || cls == "Multiply" || cls == "Average" ||
      cls == "Maximum" || cls == "Minimum") {
    if (cls == "Add") return done(Add(name));
    if (cls == "Subtract") return done(Subtract(name));
    if (cls == "Multiply") return done(Multiply(name));
    if (cls == "Average") return done(Average(name));
    if (cls == "Maximum") return done(Maximum(name));
    return done(Minimum(name));
  }
  if (cls == "Concatenate") return done(Concatenate(f.integer("axis", -1), name));
  if (cls == "Bidirectional") {
    const json& inner_json = f.raw("layer");
    if (!inner_json.is_object()) f.bad("layer", inner_json, "must be an object (the inner layer)");
    LayerSpec inner;
    inner.cls = json_string_or(inner_json, "class_name", "", f.at("layer"));
    inner.config = inner_json.value("config", json::object());
    if (!inner.config.is_object())
      f.bad("layer", inner.config, "has a config that is not an object");
    inner.name = json_string_or(inner.config, "name", inner.cls, f.at("layer") + ".config");
    if (inner.cls != "LSTM" && inner.cls != "GRU" && inner.cls != "SimpleRNN")
      f.bad("layer", inner.cls, "is not supported (LSTM, GRU or SimpleRNN)");
    if (f.has("backward_layer")) check_backward_layer(f, inner_json, f.raw("backward_layer"));
    const std::string merge = f.string("merge_mode", "concat");
    if (merge != "concat" && merge != "sum" && merge != "mul" && merge != "ave")
      f.bad("merge_mode", merge, "is not supported (concat, sum, mul or ave)");
    std::vector<WeightRole> inner_roles;
    RecurrentLayer rnn = build_rnn(inner, ctx, inner.name, inner_roles, "", "");
    // Bidirectional names its copies forward_<name> and backward_<name>.
    std::string base = inner.name;
    for (const char* p : {"forward_", "backward_"})
      if (base.rfind(p, 0) == 0) base = base.substr(std::string(p).size());
    std::vector<WeightRole> roles;
    for (const char* side : {"forward", "backward"})
      for (const WeightRole& r : inner_roles)
        roles.push_back({std::string(side) + "_" + base + "." + r.cpp,
                         std::string(side) + "_layer/" + r.k3,
                         std::string(side) + "_" + base + "/" + r.tfjs});
    return done(Bidirectional(rnn, BidirectionalOptions().merge_mode(merge).name(name)), roles);
  }
  fail(ctx.where, ": layer '", shown_name(name), "' of class '", shown_name(cls),
       "' is not supported yet");
}

}  // namespace autoshard::keras
