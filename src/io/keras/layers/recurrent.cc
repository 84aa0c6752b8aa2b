// Keras's recurrent layers: LSTM, GRU, SimpleRNN and the Bidirectional
// wrapper around one of them.
#include "autoshard/json.h"
#include "autoshard/nn/recurrent_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// The options LSTM, GRU and SimpleRNN share, read in one order for all three.
struct KerasRnnCommon {
  int64_t units;
  bool use_bias;
  std::string activation;
  double dropout, recurrent_dropout;
  bool return_sequences, go_backwards;
};

KerasRnnCommon keras_rnn_common(LayerConfig& f) {
  KerasRnnCommon c;
  c.units = f.positive("units");
  // Keras 2's RNN config always holds time_major (false: batch first).
  f.expect("time_major", false, "is not supported (inputs are [batch, steps, features])");
  c.use_bias = f.boolean("use_bias", true);
  c.activation = f.activation_name("activation", "tanh");
  c.dropout = f.number("dropout", 0);
  c.recurrent_dropout = f.number("recurrent_dropout", 0);
  if (c.dropout < 0 || c.dropout >= 1) f.bad("dropout", c.dropout, "must be in [0, 1)");
  if (c.recurrent_dropout < 0 || c.recurrent_dropout >= 1)
    f.bad("recurrent_dropout", c.recurrent_dropout, "must be in [0, 1)");
  c.return_sequences = f.boolean("return_sequences", false);
  if (f.boolean("return_state", false))
    f.bad("return_state", true, "is not supported yet (a layer of several outputs)");
  c.go_backwards = f.boolean("go_backwards", false);
  f.expect("stateful", false, "is not supported (state kept between batches)");
  f.weight_extras({"kernel", "recurrent", "bias"});
  return c;
}

// Keras 2 and TF.js default the gates to hard_sigmoid, Keras 3 to sigmoid.
std::string keras_recurrent_activation(LayerConfig& f) {
  return f.activation_name("recurrent_activation",
                           f.ctx().dialect == Dialect::Keras3 ? "sigmoid" : "hard_sigmoid");
}

// The options of an LSTMOptions, GRUOptions or SimpleRNNOptions that `c` gives.
template <typename Options>
Options keras_rnn_options(const KerasRnnCommon& c, const LayerConfig& f) {
  return Options()
      .activation(c.activation)
      .use_bias(c.use_bias)
      .dropout(c.dropout)
      .recurrent_dropout(c.recurrent_dropout)
      .seed(f.ctx().seed)
      .return_sequences(c.return_sequences)
      .go_backwards(c.go_backwards)
      .name(f.name());
}

// The layer `f` configures (f.cls(): LSTM, GRU or SimpleRNN), and its
// weights' roles: Keras 3 saves them under the layer's cell.
RecurrentLayer keras_rnn(LayerConfig& f, std::vector<WeightRole>& roles) {
  const KerasRnnCommon c = keras_rnn_common(f);
  std::vector<std::string> names = {"kernel", "recurrent_kernel"};
  if (c.use_bias) names.push_back("bias");
  for (size_t i = 0; i < names.size(); ++i)
    roles.push_back({names[i], "cell/vars/" + std::to_string(i), names[i]});
  if (f.cls() == "LSTM") {
    LSTMOptions o = keras_rnn_options<LSTMOptions>(c, f);
    o.recurrent_activation(keras_recurrent_activation(f));
    o.unit_forget_bias(f.boolean("unit_forget_bias", true));
    return LSTM(c.units, o);
  }
  if (f.cls() == "GRU") {
    GRUOptions o = keras_rnn_options<GRUOptions>(c, f);
    o.recurrent_activation(keras_recurrent_activation(f));
    o.reset_after(f.boolean("reset_after", f.ctx().dialect != Dialect::TFJS));
    return GRU(c.units, o);
  }
  return SimpleRNN(c.units, keras_rnn_options<SimpleRNNOptions>(c, f));
}

BuiltLayer keras_recurrent_entry(LayerConfig& f) {
  std::vector<WeightRole> roles;
  RecurrentLayer layer = keras_rnn(f, roles);
  return {layer, roles};
}

// Keras 3 always writes Bidirectional's backward_layer: the forward layer's
// copy with go_backwards flipped (and its own name). That one is what the
// C++ Bidirectional builds; a backward layer configured otherwise is not.
void check_keras_backward_layer(LayerConfig& f, const json& forward, const json& backward) {
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
  if (same_class && flipped && core(forward) == core(backward)) return;
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

BuiltLayer keras_bidirectional(LayerConfig& f) {
  const json& inner_json = f.raw("layer");
  if (!inner_json.is_object()) f.bad("layer", inner_json, "must be an object (the inner layer)");
  LayerSpec inner;
  inner.cls = json_string_or(inner_json, "class_name", "", f.at("layer"));
  inner.config = inner_json.value("config", json::object());
  if (!inner.config.is_object()) f.bad("layer", inner.config, "has a config that is not an object");
  inner.name = json_string_or(inner.config, "name", inner.cls, f.at("layer") + ".config");
  if (inner.cls != "LSTM" && inner.cls != "GRU" && inner.cls != "SimpleRNN")
    f.bad("layer", inner.cls, "is not supported (LSTM, GRU or SimpleRNN)");
  if (f.has("backward_layer")) check_keras_backward_layer(f, inner_json, f.raw("backward_layer"));
  const std::string merge = f.string("merge_mode", "concat");
  if (merge != "concat" && merge != "sum" && merge != "mul" && merge != "ave")
    f.bad("merge_mode", merge, "is not supported (concat, sum, mul or ave)");
  std::vector<WeightRole> inner_roles;
  LayerConfig inner_config(inner, f.ctx());
  RecurrentLayer rnn = keras_rnn(inner_config, inner_roles);
  inner_config.finish();
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
  return {Bidirectional(rnn, BidirectionalOptions().merge_mode(merge).name(f.name())), roles};
}

}  // namespace

void add_recurrent_layers(LayerTable& table) {
  for (const char* cls : {"LSTM", "GRU", "SimpleRNN"}) table.add(cls, keras_recurrent_entry);
  table.add("Bidirectional", keras_bidirectional);
}

}  // namespace autoshard::keras
