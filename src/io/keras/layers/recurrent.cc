// Keras's recurrent layers: LSTM, GRU, SimpleRNN, the Bidirectional
// wrapper around one of them, and ConvLSTM1D/2D.
#include <optional>

#include "autoshard/json.h"
#include "autoshard/nn/conv_lstm.h"
#include "autoshard/nn/recurrent_layers.h"
#include "io/keras/layer_table.h"

namespace autoshard::keras {

using nlohmann::json;

namespace {

// Keras 2 and TF.js default the gates to hard_sigmoid, Keras 3 to sigmoid.
std::string keras_recurrent_activation(LayerConfig& f) {
  return f.activation_name("recurrent_activation",
                           f.ctx().dialect == Dialect::Keras3 ? "sigmoid" : "hard_sigmoid");
}

// A recurrent cell's weights: kernel, recurrent_kernel and bias, which
// Keras 3 saves under the layer's cell.
std::vector<WeightRole> cell_roles(bool use_bias) {
  std::vector<std::string> names = {"kernel", "recurrent_kernel"};
  if (use_bias) names.push_back("bias");
  return plain_roles(names, "cell/");
}

// The options LSTM, GRU and SimpleRNN share (RecurrentOptions), read in one
// order for all three; the weights' roles: Keras 3 saves them under the
// layer's cell.
template <typename Self>
Self keras_rnn_options(LayerConfig& f, std::vector<WeightRole>& roles) {
  Self o;
  // Keras 2's RNN config always holds time_major (false: batch first).
  f.expect("time_major", false, "is not supported (inputs are [batch, steps, features])");
  o.use_bias(f.boolean("use_bias", true));
  o.activation(f.activation_name("activation", "tanh"));
  o.dropout(f.number("dropout", 0));
  o.recurrent_dropout(f.number("recurrent_dropout", 0));
  if (o.dropout_ < 0 || o.dropout_ >= 1) f.bad("dropout", o.dropout_, "must be in [0, 1)");
  if (o.recurrent_dropout_ < 0 || o.recurrent_dropout_ >= 1)
    f.bad("recurrent_dropout", o.recurrent_dropout_, "must be in [0, 1)");
  o.return_sequences(f.boolean("return_sequences", false));
  o.return_state(f.boolean("return_state", false));
  o.go_backwards(f.boolean("go_backwards", false));
  o.zero_output_for_mask(f.boolean("zero_output_for_mask", false));
  f.expect("stateful", false,
           "is not supported (state kept between batches); save the model with stateful=False");
  // Keras's defaults (keras/src/layers/rnn/lstm.py, LSTMCell.__init__, and
  // gru.py, simple_rnn.py): they draw a layer built without weights.
  o.kernel_initializer(f.initializer_or("kernel_initializer", Initializer::glorot_uniform()));
  o.recurrent_initializer(f.initializer_or("recurrent_initializer", Initializer::orthogonal()));
  o.bias_initializer(f.initializer_or("bias_initializer", Initializer::zeros()));
  f.weight_extras({"kernel", "recurrent", "bias"});
  o.seed(f.ctx().seed).name(f.name());
  const std::vector<WeightRole> cell = cell_roles(o.use_bias_);
  roles.insert(roles.end(), cell.begin(), cell.end());
  return o;
}

// The layer `f` configures (f.cls(): LSTM, GRU or SimpleRNN), and its
// weights' roles.
RecurrentLayer keras_rnn(LayerConfig& f, std::vector<WeightRole>& roles) {
  const int64_t units = f.positive("units");
  if (f.cls() == "LSTM") {
    LSTMOptions o = keras_rnn_options<LSTMOptions>(f, roles);
    o.recurrent_activation(keras_recurrent_activation(f));
    o.unit_forget_bias(f.boolean("unit_forget_bias", true));
    return LSTM(units, o);
  }
  if (f.cls() == "GRU") {
    GRUOptions o = keras_rnn_options<GRUOptions>(f, roles);
    o.recurrent_activation(keras_recurrent_activation(f));
    o.reset_after(f.boolean("reset_after", f.ctx().dialect != Dialect::TFJS));
    return GRU(units, o);
  }
  return SimpleRNN(units, keras_rnn_options<SimpleRNNOptions>(f, roles));
}

BuiltLayer keras_recurrent_entry(LayerConfig& f) {
  std::vector<WeightRole> roles;
  RecurrentLayer layer = keras_rnn(f, roles);
  return {layer, roles};
}

// The inner layer `field` ("layer" or "backward_layer") of a Bidirectional
// as a LayerSpec: LSTM, GRU or SimpleRNN.
LayerSpec inner_spec(LayerConfig& f, const char* field) {
  const json& inner_json = f.raw(field);
  if (!inner_json.is_object()) f.bad(field, inner_json, "must be an object (a recurrent layer)");
  LayerSpec inner;
  inner.cls = json_string_or(inner_json, "class_name", "", f.at(field));
  inner.config = inner_json.value("config", json::object());
  if (!inner.config.is_object()) f.bad(field, inner.config, "has a config that is not an object");
  inner.name = json_string_or(inner.config, "name", inner.cls, f.at(field) + ".config");
  if (inner.cls != "LSTM" && inner.cls != "GRU" && inner.cls != "SimpleRNN")
    f.bad(field, inner.cls, "is not supported (LSTM, GRU or SimpleRNN)");
  return inner;
}

std::string without(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0 ? s.substr(prefix.size()) : s;
}

// keras/src/layers/rnn/bidirectional.py: a forward copy of `layer`
// ("forward_<name>") and a backward layer, Keras 3's go_backwards copy or
// the file's own `backward_layer`, whose options may differ (units, bias,
// activations; _verify_layer_config: go_backwards differs, return_sequences
// and return_state agree). Keras 3 keeps a given backward layer's name;
// Keras 2 and TF.js prefix it with "backward_" (their wrappers.py and
// wrappers.ts), and name its weights so.
BuiltLayer keras_bidirectional(LayerConfig& f) {
  LayerSpec inner = inner_spec(f, "layer");
  // merge_mode null: the two outputs, unmerged.
  const std::string named = f.string("merge_mode", "concat");
  const std::string merge = f.null("merge_mode") ? "none" : named;
  if (merge != "concat" && merge != "sum" && merge != "mul" && merge != "ave" && merge != "none")
    f.bad("merge_mode", merge, "is not supported (concat, sum, mul, ave or null)");
  std::vector<WeightRole> forward_roles, backward_roles;
  LayerConfig inner_config(inner, f.ctx());
  RecurrentLayer rnn = keras_rnn(inner_config, forward_roles);
  inner_config.finish();
  // Bidirectional names its copies forward_<name> and backward_<name>.
  const std::string base = without(without(inner.name, "forward_"), "backward_");
  const std::string forward_name = "forward_" + base;
  std::string backward_name = "backward_" + base, backward_file_name;
  std::optional<RecurrentLayer> backward;
  const json* given = f.has("backward_layer") ? &f.raw("backward_layer") : nullptr;
  if (given && !given->is_null()) {
    LayerSpec b = inner_spec(f, "backward_layer");
    const std::string at = f.at("backward_layer.config");
    for (const char* k : {"go_backwards", "return_sequences", "return_state"}) {
      const bool same = json_bool_or(b.config, k, false, at) ==
                        json_bool_or(inner.config, k, false, f.at("layer.config"));
      if (same != (std::string(k) != "go_backwards"))
        f.bad("backward_layer", *given,
              cat("must ", same ? "differ from" : "agree with", " the forward layer in '", k,
                  "' (Keras's Bidirectional._verify_layer_config)"));
    }
    // The engine's path keeps the config's name in every dialect (one model,
    // whichever file it came from); Keras 2 and TF.js name its weights
    // "backward_<name>/...".
    backward_name = b.name;
    if (f.ctx().dialect != Dialect::Keras3) backward_file_name = "backward_" + b.name;
    LayerConfig backward_config(b, f.ctx());
    backward = keras_rnn(backward_config, backward_roles);
    backward_config.finish();
  } else {
    backward_roles = forward_roles;
  }
  if (backward_file_name.empty()) backward_file_name = backward_name;
  std::vector<WeightRole> roles;
  auto add_roles = [&](const char* side, const std::string& name, const std::string& file_name,
                       const std::vector<WeightRole>& r) {
    for (const WeightRole& w : r)
      roles.push_back(
          {name + "." + w.cpp, std::string(side) + "_layer/" + w.k3, file_name + "/" + w.tfjs});
  };
  add_roles("forward", forward_name, forward_name, forward_roles);
  add_roles("backward", backward_name, backward_file_name, backward_roles);
  const BidirectionalOptions o = BidirectionalOptions().merge_mode(merge).name(f.name());
  if (backward) return {Bidirectional(rnn, *backward, o), roles};
  return {Bidirectional(rnn, o), roles};
}

// keras/src/layers/rnn/conv_lstm2d.py (ConvLSTM2D, over ConvLSTM and
// ConvLSTMCell in conv_lstm.py): the cell's kernel, recurrent_kernel and
// bias, saved under the cell as an LSTM's are; dropout and
// recurrent_dropout as ConvLSTMCell.call applies them (nn/conv_lstm.h).
// ConvLSTM1D and ConvLSTM3D (keras/src/layers/rnn/conv_lstm1d.py,
// conv_lstm3d.py) take the same arguments with one or three values per size.
BuiltLayer keras_conv_lstm(LayerConfig& f) {
  const int rank = f.cls() == "ConvLSTM1D" ? 1 : f.cls() == "ConvLSTM3D" ? 3 : 2;
  ConvLSTM2DOptions o;
  const int64_t filters = f.positive("filters");
  const std::vector<int64_t> kernel = f.sizes("kernel_size", rank, {});
  if (kernel.empty()) f.bad("kernel_size", nullptr, "is required");
  const std::vector<int64_t> ones(size_t(rank), 1);
  o.strides(f.sizes("strides", rank, ones));
  o.padding(f.string("padding", "valid"));
  if (o.padding_ != "valid" && o.padding_ != "same")
    f.bad("padding", o.padding_, "is not supported (valid or same)");
  o.dilation_rate(f.sizes("dilation_rate", rank, ones));
  f.channels_last();
  o.activation(f.activation_name("activation", "tanh"));
  o.recurrent_activation(keras_recurrent_activation(f));
  o.use_bias(f.boolean("use_bias", true));
  o.unit_forget_bias(f.boolean("unit_forget_bias", true));
  o.kernel_initializer(f.initializer_or("kernel_initializer", Initializer::glorot_uniform()));
  o.recurrent_initializer(f.initializer_or("recurrent_initializer", Initializer::orthogonal()));
  o.bias_initializer(f.initializer_or("bias_initializer", Initializer::zeros()));
  o.dropout(f.number("dropout", 0));
  o.recurrent_dropout(f.number("recurrent_dropout", 0));
  if (o.dropout_ < 0 || o.dropout_ >= 1) f.bad("dropout", o.dropout_, "must be in [0, 1)");
  if (o.recurrent_dropout_ < 0 || o.recurrent_dropout_ >= 1)
    f.bad("recurrent_dropout", o.recurrent_dropout_, "must be in [0, 1)");
  o.return_sequences(f.boolean("return_sequences", false));
  o.return_state(f.boolean("return_state", false));
  o.go_backwards(f.boolean("go_backwards", false));
  f.expect("stateful", false,
           "is not supported (state kept between batches); save the model with stateful=False");
  f.expect("time_major", false, "is not supported (inputs are [batch, time, rows, cols, ...])");
  f.weight_extras({"kernel", "recurrent", "bias"});
  o.seed(f.ctx().seed).name(f.name());
  if (rank == 1) return {ConvLSTM1D(filters, kernel[0], o), cell_roles(o.use_bias_)};
  if (rank == 3) return {ConvLSTM3D(filters, kernel, o), cell_roles(o.use_bias_)};
  return {ConvLSTM2D(filters, kernel, o), cell_roles(o.use_bias_)};
}

}  // namespace

void add_recurrent_layers(LayerTable& table) {
  for (const char* cls : {"LSTM", "GRU", "SimpleRNN"}) table.add(cls, keras_recurrent_entry);
  table.add("Bidirectional", keras_bidirectional);
  table.add("ConvLSTM1D", keras_conv_lstm);
  table.add("ConvLSTM2D", keras_conv_lstm);
  table.add("ConvLSTM3D", keras_conv_lstm);
}

}  // namespace autoshard::keras
