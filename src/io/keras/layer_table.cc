#include "io/keras/layer_table.h"

#include <map>
#include <memory>

#include "autoshard/error.h"
#include "autoshard/io/keras_layer.h"
#include "autoshard/json.h"

namespace autoshard::keras {

void LayerTable::add(const std::string& cls, LayerBuilder build) {
  const bool added = builders_.emplace(cls, std::move(build)).second;
  AS_CHECK(added, "the Keras layer table has class '", cls, "' twice");
}

const LayerBuilder* LayerTable::find(const std::string& cls) const {
  const auto it = builders_.find(cls);
  return it == builders_.end() ? nullptr : &it->second;
}

std::vector<std::string> LayerTable::classes() const {
  std::vector<std::string> out;
  for (const auto& [cls, build] : builders_) out.push_back(cls);
  return out;
}

const LayerTable& layer_table() {
  static const LayerTable table = [] {
    LayerTable t;
    add_core_layers(t);
    add_conv_layers(t);
    add_pooling_layers(t);
    add_reshaping_layers(t);
    add_normalization_layers(t);
    add_merge_layers(t);
    add_recurrent_layers(t);
    add_attention_layers(t);
    add_preprocessing_layers(t);
    return t;
  }();
  return table;
}

namespace {

// A nested Sequential or Functional model of one input and one output,
// traced under its own name scope.
class NestedKerasModel : public LayerImpl {
 public:
  struct Step {
    Layer layer;
    std::vector<TensorRef> inputs;
    std::string name;
  };
  NestedKerasModel(std::string name, std::vector<std::string> inputs, std::vector<Step> steps,
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
    for (size_t i = 0; i < in.size(); ++i) values[key({inputs_[i], 0, 0})] = in[i];
    for (const Step& s : steps_) {
      std::vector<Value> args;
      for (const TensorRef& r : s.inputs) {
        auto it = values.find(key(r));
        AS_CHECK(it != values.end(), "nested model ", name(), ": layer '", s.name,
                 "' reads output ", r.tensor, " of '", r.layer, "', which has no such output");
        args.push_back(it->second);
      }
      const int k = calls[s.name]++;
      const std::vector<Value> outs = s.layer.outputs(trace, args);
      for (size_t j = 0; j < outs.size(); ++j) values[key({s.name, k, int(j)})] = outs[j];
    }
    return values.at(key(outputs_.at(0)));
  }
  // "layer:node:tensor": output `tensor` of the layer's call `node`.
  static std::string key(const TensorRef& r) {
    return r.layer + ":" + std::to_string(r.node) + ":" + std::to_string(r.tensor);
  }

 private:
  std::vector<std::string> inputs_;
  std::vector<Step> steps_;
  std::vector<TensorRef> outputs_;
};

BuiltLayer build_nested_model(const LayerSpec& spec, const BuildContext& ctx) {
  const ModelSpec& m = *spec.nested;
  const std::string& name = spec.name;
  AS_CHECK(m.outputs.size() == 1, ctx.where, ": nested model '", name, "' has ", m.outputs.size(),
           " outputs; nested models of one output are supported");
  std::vector<NestedKerasModel::Step> steps;
  std::vector<WeightRole> roles, counters;
  std::vector<std::string> inputs;
  for (const InputLayerSpec& in : m.inputs) inputs.push_back(in.name);
  // Calls in dependency order (the config lists them so for Keras).
  for (const LayerSpec& l : m.layers) {
    BuiltLayer b = build_layer(l, ctx);
    const auto inner = [&](const WeightRole& r) -> WeightRole {
      return {l.name + "." + r.cpp, l.saved_group + "/" + r.k3, l.name + "/" + r.tfjs};
    };
    for (const WeightRole& r : b.weights) roles.push_back(inner(r));
    for (const WeightRole& r : b.counters) counters.push_back(inner(r));
    AS_CHECK(l.calls.size() == 1, ctx.where, ": layer '", l.name, "' inside nested model '", name,
             "' is called ", l.calls.size(), " times; once is supported");
    steps.push_back({b.layer, l.calls[0], l.name});
  }
  return {Layer(std::make_shared<NestedKerasModel>(name, inputs, steps, m.outputs)), roles,
          counters};
}

// `spec` with its call arguments (LayerSpec::call_kwargs) as config fields.
LayerSpec with_call_arguments(const LayerSpec& spec, const BuildContext& ctx) {
  LayerSpec merged = spec;
  for (const auto& [k, v] : spec.call_kwargs.items()) {
    AS_CHECK(!merged.config.contains(k), ctx.where, ": layer '", shown_name(spec.name),
             "': call argument '", k, "' is also a field of its config");
    merged.config[k] = v;
  }
  merged.call_kwargs = nlohmann::json::object();
  return merged;
}

}  // namespace

BuiltLayer build_layer(const LayerSpec& spec, const BuildContext& ctx) {
  if (spec.nested) return build_nested_model(spec, ctx);
  if (!spec.call_kwargs.empty()) return build_layer(with_call_arguments(spec, ctx), ctx);
  LayerConfig f(spec, ctx);  // the checks every layer shares come first
  const LayerBuilder* build = layer_table().find(spec.cls);
  if (!build)
    fail(ctx.where, ": layer '", shown_name(spec.name), "' of class '", shown_name(spec.cls),
         "' is not supported yet");
  BuiltLayer built = (*build)(f);
  f.finish();
  return built;
}

}  // namespace autoshard::keras

namespace autoshard {

Layer keras_layer(const std::string& class_name, const nlohmann::json& config, uint64_t seed) {
  keras::LayerSpec spec;
  spec.cls = class_name;
  spec.config = config;
  spec.name = json_string_or(config, "name", "", "keras.layers." + class_name);
  keras::BuildContext ctx;
  ctx.where = "keras.layers";
  ctx.seed = seed;
  return keras::build_layer(spec, ctx).layer;
}

}  // namespace autoshard
