// Keras layers against TensorFlow.js (tests/data/keras_layers, written by
// tools/keras_fixtures/make_fixtures.mjs): each fixture model is built here
// by hand from its Keras 3 spec in index.json (functional graphs with shared
// layers, several inputs and outputs, and return_state's extra outputs
// included), given the fixture's weights, and compared
//   - on one device: inference outputs, the training-mode loss (loss_weights
//     summed over the outputs), the gradient of every weight and float input,
//     4 steps each of Adam, SGD with momentum and RMSprop, and every weight
//     (moving statistics included) after Adam's steps;
//   - on meshes: outputs, Adam's losses and weights after its steps, laid out
//     by AutoShard and by a layout map that splits every weight's last axis
//     over "model", on model=3, model=4 and data=2,model=2 (uneven
//     everywhere: odd sizes over 3 and 4 devices, a batch of 3 over 2); a
//     model with BatchNormalization also on data=4 (its batch statistics are
//     the whole batch's), and a model of 2-D (or 3-D) convolutions also with
//     its images' rows split over rows=3 (a band per device, halos exchanged).
// Time: a mesh run costs up to ~0.1 s per model and plan (AutoShard's time
// limit, plus compiling the step), too much for every model on every mesh
// under the sanitizers on 2 cores. So the models of kLayersOnEveryMesh (one or more
// of each family, the whole models included) run every mesh with both
// plans; each other model runs one mesh with one plan, rotating by its index
// in index.json, so that a family's consecutive models get different meshes
// and plans (the data=4 and rows=3 runs are always made). About 4 s in
// Release.
//
// A model needing a layer, an option, a loss or an optimizer that autoshard
// does not have is skipped with GTEST_SKIP naming what is missing (none is,
// today).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/conv_layers.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/merge_layers.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/normalization_layers.h"
#include "autoshard/nn/pooling_layers.h"
#include "autoshard/nn/recurrent_layers.h"
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/nn/spatial_layers.h"
#include "autoshard/optim/keras_optimizers.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/executor.h"
#include "keras_fixtures.h"

namespace autoshard {
namespace {

using testing::keras_fixture_index;
using testing::keras_fixture_spec;
using testing::kKerasLayerFixtures;

using nlohmann::json;

// Tolerances of the issue: relative to the largest magnitude of the expected
// tensor (outputs, gradients, weights) or to the loss itself.
constexpr double kOutputTolerance = 1e-5, kGradientTolerance = 1e-4, kLossTolerance = 1e-4;

// The models that run on every mesh with both plans (see the file comment).
const std::set<std::string> kLayersOnEveryMesh = {
    "activation_gelu",
    "conv1d_same_dilated",
    "conv2d_stride2_same",
    "conv2d_groups",
    "depthwise_conv2d",
    "separable_conv2d",
    "conv2d_transpose_same",
    "max_pooling2d_same",
    "average_pooling2d_same",
    "batch_normalization",
    "group_normalization",
    "lstm_state_backwards",
    "gru_reset_after",
    "bidirectional_concat",
    "concatenate",
    "permute",
    "loss_categorical_logits",
    "resnet_cnn",
    "unet",
    "siamese",
    "two_outputs",
    "lstm_language_model",
    "conv3d_stride2_same",
    "volume_cnn",
};
const char* const kLayerMeshes[] = {"model=3", "model=4", "data=2,model=2"};

size_t index_of(const std::string& name) {
  const json& models = keras_fixture_index().at("models");
  for (size_t i = 0; i < models.size(); ++i)
    if (models[i].at("name") == name) return i;
  return 0;
}

// The names of the models whose spec satisfies `keep` (every model by default).
std::vector<std::string> model_names(const std::function<bool(const json&)>& keep = nullptr) {
  std::vector<std::string> names;
  try {
    for (const json& m : keras_fixture_index().at("models"))
      if (!keep || keep(m)) names.push_back(m.at("name"));
  } catch (const std::exception&) {
    names.push_back("index_json_unreadable");  // fails loudly in keras_fixture_spec
  }
  return names;
}

bool has_layer(const json& spec, const std::string& class_pattern) {
  for (const json& l : spec.at("layers"))
    if (std::regex_search(std::string(l.at("class_name")), std::regex(class_pattern))) return true;
  return false;
}
bool trains(const json& spec) {
  return !spec.at("weights").empty();
}
bool has_batch_normalization(const json& spec) {
  return has_layer(spec, "^BatchNormalization$");
}
// A model of images ([rows, cols, channels] floats) with a 2-D convolution,
// or of volumes ([depth, rows, cols, channels]) with a 3-D one (whose
// Conv2D per depth tap splits its rows the same way).
bool convolves_images(const json& spec) {
  const json& in = spec.at("inputs").at(0);
  const size_t rank = in.at("shape").size();
  return in.at("dtype") == "float32" &&
         ((rank == 3 && has_layer(spec, "Conv2D")) || (rank == 4 && has_layer(spec, "Conv3D")));
}

// Why a fixture cannot be built ("" when it can).
struct Missing {
  std::string what;
  void note(const std::string& w) {
    if (what.empty()) what = w;
  }
};

bool known_activation(const std::string& name) {
  try {
    check_activation(name == "linear" ? "" : name);
    return true;
  } catch (const Error&) {
    return false;
  }
}

// Keras's ((top, bottom), (left, right)) as {top, bottom, left, right}.
std::vector<int64_t> flat_pairs(const json& pairs) {
  std::vector<int64_t> flat;
  for (const json& p : pairs)
    for (const json& v : p) flat.push_back(v);
  return flat;
}

std::optional<Layer> make_conv_or_pooling(const json& l, Missing& missing) {
  const std::string cls = l.at("class_name"), name = l.at("name");
  const json& c = l.at("config");
  const auto ints = [&](const char* key) { return c.at(key).get<std::vector<int64_t>>(); };
  if (cls.find("Conv") != std::string::npos) {
    const std::string a = c.value("activation", "linear");
    if (!known_activation(a)) return missing.note("activation '" + a + "'"), std::nullopt;
    ConvOptions o = ConvOptions()
                        .strides(ints("strides"))
                        .padding(c.at("padding"))
                        .dilation_rate(ints("dilation_rate"))
                        .activation(a == "linear" ? "" : a)
                        .use_bias(c.at("use_bias"))
                        .name(name);
    if (c.contains("groups")) o.groups(c.at("groups"));
    if (c.contains("depth_multiplier")) o.depth_multiplier(c.at("depth_multiplier"));
    if (cls == "Conv1D") return Conv1D(c.at("filters"), ints("kernel_size").at(0), o);
    if (cls == "Conv2D") return Conv2D(c.at("filters"), ints("kernel_size"), o);
    if (cls == "Conv3D") return Conv3D(c.at("filters"), ints("kernel_size"), o);
    if (cls == "DepthwiseConv2D") return DepthwiseConv2D(ints("kernel_size"), o);
    if (cls == "SeparableConv2D") return SeparableConv2D(c.at("filters"), ints("kernel_size"), o);
    if (cls == "Conv2DTranspose") return Conv2DTranspose(c.at("filters"), ints("kernel_size"), o);
  }
  if (cls.rfind("Global", 0) == 0) {
    const GlobalPoolingOptions o = GlobalPoolingOptions().name(name);
    if (cls == "GlobalAveragePooling1D") return GlobalAveragePooling1D(o);
    if (cls == "GlobalAveragePooling2D") return GlobalAveragePooling2D(o);
    if (cls == "GlobalMaxPooling1D") return GlobalMaxPooling1D(o);
    if (cls == "GlobalMaxPooling2D") return GlobalMaxPooling2D(o);
  }
  if (cls.find("Pooling") != std::string::npos) {
    const PoolingOptions o = PoolingOptions()
                                 .pool_size(ints("pool_size"))
                                 .strides(ints("strides"))
                                 .padding(c.at("padding"))
                                 .name(name);
    if (cls == "MaxPooling1D") return MaxPooling1D(o);
    if (cls == "MaxPooling2D") return MaxPooling2D(o);
    if (cls == "AveragePooling1D") return AveragePooling1D(o);
    if (cls == "AveragePooling2D") return AveragePooling2D(o);
    if (cls == "MaxPooling3D") return MaxPooling3D(o);
    if (cls == "AveragePooling3D") return AveragePooling3D(o);
  }
  return std::nullopt;
}

// BatchNormalization, GroupNormalization, the shape layers and the merge
// layers (Add is with the transformer layers).
std::optional<Layer> make_composed(const json& l, Missing& missing) {
  const std::string cls = l.at("class_name"), name = l.at("name");
  const json& c = l.at("config");
  if (cls == "BatchNormalization")
    return BatchNormalization(BatchNormalizationOptions()
                                  .axis(c.at("axis"))
                                  .momentum(c.at("momentum"))
                                  .epsilon(c.at("epsilon"))
                                  .center(c.at("center"))
                                  .scale(c.at("scale"))
                                  .name(name));
  if (cls == "GroupNormalization") {
    if (c.value("axis", -1) != -1) return missing.note("GroupNormalization axis"), std::nullopt;
    return GroupNormalization(GroupNormalizationOptions()
                                  .groups(c.at("groups"))
                                  .epsilon(c.at("epsilon"))
                                  .center(c.at("center"))
                                  .scale(c.at("scale"))
                                  .name(name));
  }
  if (cls == "Flatten") return Flatten(name);
  if (cls == "Reshape") return Reshape(c.at("target_shape").get<Shape>(), name);
  if (cls == "Permute") return Permute(c.at("dims").get<std::vector<int64_t>>(), name);
  if (cls == "RepeatVector") return RepeatVector(c.at("n"), name);
  if (cls == "Rescaling") return Rescaling(c.at("scale"), c.at("offset"), name);
  if (cls == "Concatenate") return Concatenate(c.at("axis"), name);
  if (cls == "Subtract") return Subtract(name);
  if (cls == "Multiply") return Multiply(name);
  if (cls == "Average") return Average(name);
  if (cls == "Maximum") return Maximum(name);
  if (cls == "Minimum") return Minimum(name);
  if (cls == "ZeroPadding2D") return ZeroPadding2D(flat_pairs(c.at("padding")), name);
  if (cls == "Cropping2D") return Cropping2D(flat_pairs(c.at("cropping")), name);
  if (cls == "UpSampling2D")
    return UpSampling2D(c.at("size").get<std::vector<int64_t>>(), c.at("interpolation"), name);
  return std::nullopt;
}

// LSTM, GRU and SimpleRNN, alone or inside Bidirectional.
std::optional<RecurrentLayer> make_rnn(const json& l) {
  const std::string cls = l.at("class_name"), name = l.at("name");
  const json& c = l.at("config");
  if (cls == "LSTM")
    return LSTM(c.at("units"), LSTMOptions()
                                   .activation(c.at("activation"))
                                   .recurrent_activation(c.at("recurrent_activation"))
                                   .use_bias(c.at("use_bias"))
                                   .unit_forget_bias(c.at("unit_forget_bias"))
                                   .return_sequences(c.at("return_sequences"))
                                   .return_state(c.at("return_state"))
                                   .go_backwards(c.at("go_backwards"))
                                   .name(name));
  if (cls == "GRU")
    return GRU(c.at("units"), GRUOptions()
                                  .activation(c.at("activation"))
                                  .recurrent_activation(c.at("recurrent_activation"))
                                  .use_bias(c.at("use_bias"))
                                  .reset_after(c.at("reset_after"))
                                  .return_sequences(c.at("return_sequences"))
                                  .return_state(c.at("return_state"))
                                  .go_backwards(c.at("go_backwards"))
                                  .name(name));
  if (cls == "SimpleRNN")
    return SimpleRNN(c.at("units"), SimpleRNNOptions()
                                        .activation(c.at("activation"))
                                        .use_bias(c.at("use_bias"))
                                        .return_sequences(c.at("return_sequences"))
                                        .return_state(c.at("return_state"))
                                        .go_backwards(c.at("go_backwards"))
                                        .name(name));
  return std::nullopt;
}

// A layer's call that returns all its outputs (return_state's states after
// the output); a one-output layer returns just that.
using StatesCall = std::function<std::vector<Value>(Trace&, const std::vector<Value>&)>;

// The C++ layer of one Keras 3 layer spec, or nullopt with `missing` set;
// `states` gets the call that returns every output of a recurrent layer.
std::optional<Layer> make_layer(const json& l, Missing& missing, StatesCall* states) {
  const std::string cls = l.at("class_name"), name = l.at("name");
  const json& c = l.at("config");
  const auto activation = [&](const std::string& key) -> std::optional<std::string> {
    const std::string a = c.value(key, "linear");
    if (!known_activation(a)) return missing.note("activation '" + a + "'"), std::nullopt;
    return a == "linear" ? "" : a;
  };
  if (cls == "Dense") {
    auto a = activation("activation");
    if (!a) return std::nullopt;
    return Dense(c.at("units"),
                 DenseOptions().activation(*a).use_bias(c.at("use_bias")).name(name));
  }
  if (cls == "Activation") {
    auto a = activation("activation");
    if (!a) return std::nullopt;
    return Activation(*a, name);
  }
  if (cls == "Add") return Add(name);
  if (cls == "LeakyReLU") {
    // autoshard's leaky_relu has Keras 3's default negative slope, 0.2.
    if (c.at("negative_slope") != 0.2 || !known_activation("leaky_relu"))
      return missing.note("LeakyReLU(negative_slope=" + c.at("negative_slope").dump() + ")"),
             std::nullopt;
    return Activation("leaky_relu", name);
  }
  if (cls == "Embedding")
    return Embedding(c.at("input_dim"), c.at("output_dim"), EmbeddingOptions().name(name));
  if (std::optional<Layer> conv = make_conv_or_pooling(l, missing)) return conv;
  if (std::optional<Layer> composed = make_composed(l, missing)) return composed;
  if (cls == "Bidirectional") {
    std::optional<RecurrentLayer> inner = make_rnn(c.at("layer"));
    if (!inner) return missing.note("Bidirectional of " + c.at("layer").dump()), std::nullopt;
    Bidirectional bi(*inner, BidirectionalOptions().merge_mode(c.at("merge_mode")).name(name));
    *states = [bi](Trace& t, const std::vector<Value>& in) {
      return bi.call_with_states(t, in.at(0), {in.begin() + 1, in.end()});
    };
    return bi;
  }
  if (std::optional<RecurrentLayer> rnn = make_rnn(l)) {
    *states = [rnn = *rnn](Trace& t, const std::vector<Value>& in) {
      return rnn.call_with_states(t, in.at(0), {in.begin() + 1, in.end()});
    };
    return Layer(*rnn);
  }
  if (!missing.what.empty()) return std::nullopt;
  missing.note("layer " + cls);
  return std::nullopt;
}

// Output k of a layer of several outputs ("lstm:2", return_state's c): the
// layer traced once more under its own name, so its weights are shared.
class NthOutput : public LayerImpl {
 public:
  NthOutput(StatesCall call, size_t k) : LayerImpl(""), call_(std::move(call)), k_(k) {}
  Value call(Trace& trace, const std::vector<Value>& inputs) override {
    const std::vector<Value> all = call_(trace, inputs);
    AS_CHECK(k_ < all.size(), "output ", k_, " of a layer of ", all.size(), " outputs");
    return all[k_];
  }

 private:
  StatesCall call_;
  size_t k_;
};

// A loss of the spec as a traced function, or null with `missing` set.
Loss make_loss(const json& loss, Missing& missing) {
  const std::string name = loss.at("name");
  const bool from_logits = loss.value("from_logits", false);
  const double smoothing = loss.value("label_smoothing", 0.0);
  if (name == "mean_squared_error") return losses::MeanSquaredError();
  if (name == "mean_absolute_error") return losses::MeanAbsoluteError();
  if (name == "huber") return losses::Huber(loss.at("delta"));
  if (name == "sparse_categorical_crossentropy")
    return losses::SparseCategoricalCrossentropy({.from_logits = from_logits});
  if (name == "categorical_crossentropy")
    return losses::CategoricalCrossentropy(
        {.from_logits = from_logits, .label_smoothing = smoothing});
  if (name == "binary_crossentropy")
    return losses::BinaryCrossentropy({.from_logits = from_logits, .label_smoothing = smoothing});
  missing.note("loss " + loss.dump());
  return nullptr;
}

// sum_k loss_weights[k] * loss_k(output_k, target_k) as a layer over
// [outputs..., targets...]: the fixtures' training loss as a model output,
// so that one trace holds every output's loss and its gradients.
class TotalLoss : public LayerImpl {
 public:
  TotalLoss(std::vector<Loss> losses, std::vector<double> weights)
      : LayerImpl(""), losses_(std::move(losses)), weights_(std::move(weights)) {}
  Value call(Trace&, const std::vector<Value>& in) override {
    const size_t n = losses_.size();
    AS_CHECK(in.size() == 2 * n, "TotalLoss takes outputs and targets");
    Value total;
    for (size_t k = 0; k < n; ++k) {
      Value l = losses_[k](in[k], in[n + k]);
      if (weights_[k] != 1.0) l = ops::scale(l, weights_[k]);
      total = total.valid() ? total + l : l;
    }
    return total;
  }

 private:
  std::vector<Loss> losses_;
  std::vector<double> weights_;
};

// Keras 3's optimizers with the fixtures' hyper-parameters.
std::shared_ptr<Optimizer> make_optimizer(const std::string& name, Missing& missing) {
  const json& o = keras_fixture_index().at("optimizers").at(name);
  if (name == "adam")
    return optimizers::Adam({.learning_rate = o.at("learning_rate"),
                             .beta_1 = o.at("beta_1"),
                             .beta_2 = o.at("beta_2"),
                             .epsilon = o.at("epsilon"),
                             .epsilon_hat = false});  // TF.js adds epsilon after the correction
  if (name == "sgd_momentum")
    return optimizers::SGD({.learning_rate = o.at("learning_rate"),
                            .momentum = o.at("momentum"),
                            .nesterov = o.at("nesterov")});
  if (name == "rmsprop")
    return optimizers::RMSprop({.learning_rate = o.at("learning_rate"),
                                .rho = o.at("rho"),
                                .momentum = o.at("momentum"),
                                .epsilon = o.at("epsilon"),
                                .centered = o.at("centered")});
  missing.note("optimizer " + std::string(o.at("class_name")));
  return nullptr;
}

// One fixture: its spec, its reference tensors and the model built from them.
struct LayerFixture {
  const json& spec;
  SafetensorsFile ref;
  Missing missing;
  std::vector<SymbolicTensor> inputs_, outputs_;
  std::vector<Loss> losses;
  std::vector<double> loss_weights;
  std::unique_ptr<Model> model;

  explicit LayerFixture(const std::string& name)
      : spec(keras_fixture_spec(name)),
        ref(kKerasLayerFixtures + "/" + std::string(spec.at("file"))) {
    build();
  }

  void build() {
    std::map<std::string, SymbolicTensor> tensors;
    for (const json& in : spec.at("inputs")) {
      Shape shape = in.at("shape").get<Shape>();
      const DType dtype = in.at("dtype") == "int32" ? DType::I32 : DType::F32;
      inputs_.push_back(tensors[in.at("name")] = Input(shape, dtype, in.at("name")));
    }
    std::map<std::string, Layer> layers;
    std::map<std::string, StatesCall> states;
    for (const json& l : spec.at("layers")) {
      StatesCall s;
      if (std::optional<Layer> made = make_layer(l, missing, &s))
        layers.emplace(l.at("name"), *made);
      if (s) states[l.at("name")] = s;
    }
    // A node's inputs by node id, for the extra outputs ("lstm:2") of its layer.
    std::map<std::string, std::vector<SymbolicTensor>> inbound_of;
    const auto tensor_of = [&](const std::string& id) -> std::optional<SymbolicTensor> {
      if (tensors.count(id)) return tensors.at(id);
      const size_t colon = id.rfind(':');
      if (colon == std::string::npos) return std::nullopt;
      const std::string node = id.substr(0, colon), layer = spec_layer(node);
      if (!states.count(layer) || !inbound_of.count(node)) {
        missing.note("output " + id);
        return std::nullopt;
      }
      const size_t k = std::stoul(id.substr(colon + 1));
      return tensors[id] =
                 Layer(std::make_shared<NthOutput>(states.at(layer), k))(inbound_of.at(node));
    };
    for (const json& n : nodes()) {
      std::vector<SymbolicTensor> ins;
      for (const std::string id : n.at("inbound"))
        if (std::optional<SymbolicTensor> t = tensor_of(id)) ins.push_back(*t);
      auto layer = layers.find(n.at("layer"));
      if (!missing.what.empty() || layer == layers.end()) continue;
      const std::string id = n.value("id", std::string(n.at("layer")));
      inbound_of[id] = ins;
      tensors[id] = layer->second(ins);
    }
    for (const json& l : spec.at("losses")) losses.push_back(make_loss(l, missing));
    loss_weights = spec.at("loss_weights").get<std::vector<double>>();
    if (!missing.what.empty()) return;
    for (const std::string out : spec.at("outputs")) outputs_.push_back(tensors.at(out));
    model = std::make_unique<Model>(inputs_, outputs_, spec.at("name"));
  }

  // The layer of a node id (its "id", or its layer's name).
  std::string spec_layer(const std::string& node) const {
    for (const json& n : nodes())
      if (n.value("id", std::string(n.at("layer"))) == node) return n.at("layer");
    return node;
  }

  // The nodes, or for a chain each layer on the previous one's output.
  json nodes() const {
    if (spec.contains("nodes")) return spec.at("nodes");
    json chain = json::array();
    std::string previous = spec.at("inputs").at(0).at("name");
    for (const json& l : spec.at("layers")) {
      chain.push_back({{"layer", l.at("name")}, {"inbound", {previous}}});
      previous = l.at("name");
    }
    return chain;
  }

  // The fixture's model with the targets as further inputs and its total
  // training loss as its output.
  std::unique_ptr<Model> loss_model() const {
    std::vector<SymbolicTensor> ins = inputs_, args = outputs_;
    for (const std::string out : spec.at("outputs")) {
      const Tensor t = target(out);
      const Shape shape(t.shape().begin() + 1, t.shape().end());
      ins.push_back(Input(shape, t.dtype(), "target_" + out));
      args.push_back(ins.back());
    }
    const Layer loss(std::make_shared<TotalLoss>(losses, loss_weights));
    return std::make_unique<Model>(ins, loss(args), "loss");
  }

  // The model's weight path of a Keras path ("conv/kernel" -> "conv.kernel";
  // Keras 3's DepthwiseConv2D "kernel" may be "depthwise_kernel" here).
  std::string cpp_path(std::string keras) const {
    std::replace(keras.begin(), keras.end(), '/', '.');
    const std::vector<std::string> paths = model->weight_paths();
    auto has = [&](const std::string& p) {
      return std::find(paths.begin(), paths.end(), p) != paths.end();
    };
    if (has(keras)) return keras;
    const std::string alias =
        std::regex_replace(keras, std::regex("\\.kernel$"), ".depthwise_kernel");
    if (has(alias)) return alias;
    return keras;  // set_weight names it in its error
  }

  void load_weights(Model& m) {
    for (const json& w : spec.at("weights"))
      m.set_weight(cpp_path(w.at("path")), ref.load(w.at("path")));
  }

  ModelInputs inputs() const {
    const json& ins = spec.at("inputs");
    if (ins.size() == 1) return ref.load("input/" + std::string(ins.at(0).at("name")));
    std::map<std::string, Tensor> named;
    for (const json& in : ins)
      named[in.at("name")] = ref.load("input/" + std::string(in.at("name")));
    return named;
  }
  Tensor target(const std::string& output) const { return ref.load("target/" + output); }
  // One tensor for one output, else by output name.
  ModelTargets targets() const {
    const json& outs = spec.at("outputs");
    if (outs.size() == 1) return target(outs.at(0));
    std::map<std::string, Tensor> named;
    for (const std::string out : outs) named[out] = target(out);
    return named;
  }

  // Every output's inference values against TF.js's; "" when all match.
  std::string check_outputs(Model& m) const {
    const std::vector<Tensor> got = m.predict_outputs(inputs(), spec.at("batch"));
    std::string bad;
    for (size_t k = 0; k < got.size(); ++k) {
      const std::string out = spec.at("outputs").at(k);
      const double err = max_relative_error(got[k], ref.load("output/" + out));
      if (!(err < kOutputTolerance)) bad += " output " + out + " off by " + std::to_string(err);
    }
    return bad;
  }
};

class KerasLayersReference : public ::testing::TestWithParam<std::string> {};

#define BUILD_OR_SKIP(f)                                                              \
  LayerFixture f(GetParam());                                                         \
  if (!f.model) GTEST_SKIP() << GetParam() << ": autoshard lacks " << f.missing.what; \
  f.load_weights(*f.model)

// Inference outputs, the training-mode loss and every gradient (weights and
// float inputs) on one device.
TEST_P(KerasLayersReference, OutputLossAndGradients) {
  BUILD_OR_SKIP(f);
  EXPECT_EQ(f.model->weight_paths().size(), f.spec.at("weights").size())
      << "the C++ model has weights the Keras model lacks, or the reverse";
  EXPECT_EQ(f.check_outputs(*f.model), "");

  std::unique_ptr<Model> lm = f.loss_model();
  Graph g;
  const int64_t batch = f.spec.at("batch");
  Value loss = lm->trace_forward(g, batch, /*training=*/true);
  f.load_weights(*lm);
  std::map<std::string, std::string> keras_of;  // C++ path -> Keras path
  for (const json& w : f.spec.at("weights")) keras_of[f.cpp_path(w.at("path"))] = w.at("path");
  // Each gradient asked for with its reference's name ("grad/conv/kernel").
  std::vector<Value> wrt;
  std::vector<std::string> names;
  for (int id : g.parameters()) {
    const std::string key = g.node(id).leaf().key();
    wrt.push_back(g.value(id));
    names.push_back(keras_of.count(key) ? "grad/" + keras_of.at(key) : key);
  }
  // The inputs are traced as x, x1, x2, ...: the spec's inputs, then the
  // targets in the order of the outputs.
  const json& spec_inputs = f.spec.at("inputs");
  const json& spec_outputs = f.spec.at("outputs");
  std::vector<std::pair<int, Tensor>> feeds;
  for (size_t k = 0; k < spec_inputs.size() + spec_outputs.size(); ++k) {
    const int id = g.find_input(k == 0 ? "x" : "x" + std::to_string(k));
    if (k >= spec_inputs.size()) {
      feeds.emplace_back(id, f.target(spec_outputs.at(k - spec_inputs.size())));
      continue;
    }
    const std::string name = spec_inputs.at(k).at("name");
    feeds.emplace_back(id, f.ref.load("input/" + name));
    if (f.ref.contains("grad/input/" + name)) {
      wrt.push_back(g.value(id));
      names.push_back("grad/input/" + name);
    }
  }
  const std::vector<Value> grads = gradients(loss, wrt);
  std::vector<int> outputs{loss.id};
  for (Value v : grads) outputs.push_back(v.id);
  Executor exec(g, outputs);
  for (int id : g.parameters()) exec.bind(id, lm->gather_weight(g.node(id).leaf().key()));
  for (const auto& [id, value] : feeds) exec.bind(id, value);
  exec.run();

  const double expected_loss = f.ref.load("loss").item();
  EXPECT_NEAR(exec.value(loss.id).item(), expected_loss, kLossTolerance * std::fabs(expected_loss));
  size_t compared = 0;
  for (size_t i = 0; i < wrt.size(); ++i) {
    const std::string& name = names[i];
    if (!f.ref.contains(name)) continue;  // a non-trainable weight
    ++compared;
    const Tensor& grad = exec.value(grads[i].id);
    EXPECT_LT(max_relative_error(grad, f.ref.load(name).reshaped(grad.shape())), kGradientTolerance)
        << name;
  }
  size_t expected = 0;
  for (const json& w : f.spec.at("weights")) expected += w.at("trainable") ? 1 : 0;
  for (const json& in : spec_inputs)
    expected += f.ref.contains("grad/input/" + std::string(in.at("name"))) ? 1 : 0;
  EXPECT_EQ(compared, expected) << "a reference gradient was not compared";
}

// Trains a fresh copy of the fixture's model for the fixture's steps with
// `optimizer` (on `dist` when given) and checks each step's loss, then (for
// Adam) every weight after the steps, moving statistics included.
void check_steps(const std::string& model_name, const std::string& optimizer,
                 std::shared_ptr<Distribution> dist, const std::string& what) {
  LayerFixture f(model_name);
  if (dist) f.model->set_distribution(dist);
  f.load_weights(*f.model);
  EXPECT_EQ(f.check_outputs(*f.model), "") << what;
  Missing missing;
  f.model->compile(make_optimizer(optimizer, missing), f.losses, f.loss_weights);
  const ModelTargets targets = f.targets();
  const std::vector<float> expected = f.ref.load("steps/" + optimizer).to_vector();
  for (size_t step = 0; step < expected.size(); ++step)
    EXPECT_NEAR(f.model->train_on_batch(f.inputs(), targets), expected[step],
                kLossTolerance * std::fabs(expected[step]))
        << what << ", " << optimizer << " step " << step + 1;
  if (optimizer != "adam") return;
  for (const json& w : f.spec.at("weights")) {
    const std::string path = w.at("path");
    const Tensor after = f.model->gather_weight(f.cpp_path(path));
    EXPECT_LT(max_relative_error(after, f.ref.load("after_adam/" + path).reshaped(after.shape())),
              kGradientTolerance)
        << what << ": " << path << " after Adam";
  }
}

// Optimizer steps on one device, for each optimizer of the fixtures.
class KerasLayersTraining : public KerasLayersReference {};
TEST_P(KerasLayersTraining, OptimizerStepsOnOneDevice) {
  BUILD_OR_SKIP(f);
  for (const std::string optimizer : {"adam", "sgd_momentum", "rmsprop"}) {
    Missing missing;
    ASSERT_TRUE(make_optimizer(optimizer, missing)) << missing.what;
    check_steps(GetParam(), optimizer, nullptr, "one device");
  }
}

// Every weight's last axis over "model" (a kernel's output units or
// channels, a bias, a normalisation's channels): the layout map a Keras user
// writes for model parallelism.
LayoutMap last_axis_over_model(Model& model) {
  LayoutMap map;
  for (const std::string& path : model.weight_paths()) {
    const Shape shape = model.gather_weight(path).shape();
    std::vector<std::optional<std::string>> axes(shape.size());
    if (!axes.empty()) axes.back() = "model";
    map["^" + std::regex_replace(path, std::regex("\\."), "\\.") + "$"] = TensorLayout(axes);
  }
  return map;
}

// Outputs, then (for a model with weights) Adam's losses and weights, on `dist`.
void check_on(const std::string& model_name, std::shared_ptr<Distribution> dist,
              const std::string& what) {
  LayerFixture f(model_name);
  if (trains(f.spec)) return check_steps(model_name, "adam", dist, what);
  f.model->set_distribution(dist);
  EXPECT_EQ(f.check_outputs(*f.model), "") << what;
}

// On meshes: outputs, Adam's losses and weights, laid out by AutoShard and by
// the layout map (every mesh for kLayersOnEveryMesh, one rotating otherwise).
TEST_P(KerasLayersReference, MeshesMatchTensorFlowJs) {
  BUILD_OR_SKIP(f);
  const bool every = kLayersOnEveryMesh.count(GetParam()) > 0;
  const size_t rotation = index_of(GetParam());
  for (size_t m = 0; m < std::size(kLayerMeshes); ++m) {
    const DeviceMesh mesh = DeviceMesh::parse(kLayerMeshes[m]);
    for (int plan = 0; plan < 2; ++plan) {
      if (!every && (rotation % 6) != m * 2 + plan) continue;
      std::shared_ptr<Distribution> dist =
          plan == 0 ? std::shared_ptr<Distribution>(std::make_shared<AutoShard>(
                          mesh, "data", AutoShardOptions{.time_limit_s = 0.1}))
                    : std::make_shared<ModelParallel>(mesh, last_axis_over_model(*f.model));
      check_on(GetParam(), dist,
               std::string(plan == 0 ? "autoshard" : "layout map") + " on " + kLayerMeshes[m]);
    }
  }
}

// BatchNormalization's batch statistics are the whole batch's on any mesh:
// the batch split over data=4 (6 examples as 2, 2, 1, 1; 3 as 1, 1, 1, 0)
// trains TF.js's weights and moving statistics.
class KerasLayersBatchNormalization : public KerasLayersReference {};
TEST_P(KerasLayersBatchNormalization, BatchSplitOverFourDevices) {
  BUILD_OR_SKIP(f);
  check_on(GetParam(), std::make_shared<DataParallel>(DeviceMesh::parse("data=4")), "data=4");
}

// A spatial split (GSPMD's, which neither Keras nor DTensor offers): every
// 2-D convolution (and transposed convolution, forward and backward) runs with its image rows split
// over "rows" (a band per device; the kernel's halo comes from the neighbours), the other ops
// following their sharding rules. A layout map lays out weights only and
// inputs are split on the batch alone, so the split is asked for as a
// planner does: by fixing the convolutions' strategies (decisions()).
class RowSplit : public Distribution {
 public:
  explicit RowSplit(DeviceMesh mesh) : Distribution(std::move(mesh), "data") {}
  Sharding weight_layout(const std::string&, const Shape& shape) const override {
    return Sharding::replicated(static_cast<int>(shape.size()));
  }
  std::map<int, ShardDecision> decisions(const Graph& step,
                                         const std::map<int, Sharding>&) const override {
    std::map<int, ShardDecision> fixed;
    const int rows = mesh().axis_index("rows");
    for (int i = 0; i < step.size(); ++i) {
      const Node& n = step.node(i);
      // Conv2DTranspose is a ConvGradInput: its rows split the same way.
      if ((n.op != Op::Conv && n.op != Op::ConvGradInput) || n.shape.size() != 4) continue;
      Sharding band = Sharding::replicated(4);
      band.dims[1] = rows;
      const int kernel_rank = static_cast<int>(step.node(n.inputs.at(1)).shape.size());
      fixed[i] = ShardDecision{{band, Sharding::replicated(kernel_rank)}, band};
    }
    split_ops = std::max(split_ops, fixed.size());
    return fixed;
  }
  mutable size_t split_ops = 0;  // convolutions split in the last step planned
};

class KerasLayersSpatial : public KerasLayersReference {};
TEST_P(KerasLayersSpatial, ImageRowsSplitOverThreeDevices) {
  BUILD_OR_SKIP(f);
  const auto rows = std::make_shared<RowSplit>(DeviceMesh::parse("rows=3"));
  check_on(GetParam(), rows, "rows=3");
  EXPECT_GT(rows->split_ops, 0u) << "no convolution was split by rows";
  // The split is real: the step's convolutions exchange halos.
  if (f.spec.at("outputs").size() != 1) return;
  f.model->set_distribution(rows);
  f.model->compile(optimizers::SGD(), f.losses, f.loss_weights);
  const Tensor x = f.ref.load("input/" + std::string(f.spec.at("inputs").at(0).at("name")));
  const Tensor y = f.target(f.spec.at("outputs").at(0));
  bool halo = false;
  for (const CollectiveRecord& c :
       f.model->plan_training(x.shape(), y.shape(), y.dtype()).collectives)
    halo |= c.kind == "halo_exchange";
  EXPECT_TRUE(halo) << "no halo exchanged";
}

const auto kName = [](const ::testing::TestParamInfo<std::string>& info) { return info.param; };
INSTANTIATE_TEST_SUITE_P(Fixtures, KerasLayersReference, ::testing::ValuesIn(model_names()), kName);
INSTANTIATE_TEST_SUITE_P(Fixtures, KerasLayersTraining, ::testing::ValuesIn(model_names(trains)),
                         kName);
INSTANTIATE_TEST_SUITE_P(Fixtures, KerasLayersBatchNormalization,
                         ::testing::ValuesIn(model_names(has_batch_normalization)), kName);
INSTANTIATE_TEST_SUITE_P(Fixtures, KerasLayersSpatial,
                         ::testing::ValuesIn(model_names(convolves_images)), kName);

// The fixtures are what the tests say they are: every model's file holds
// its weights, inputs, targets, outputs and loss, and the set stays small.
TEST(KerasLayersFixtures, EveryModelHasItsTensors) {
  const json& index = keras_fixture_index();
  EXPECT_GE(index.at("models").size(), 80u);
  for (const json& m : index.at("models")) {
    SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(m.at("file")));
    for (const json& w : m.at("weights")) {
      const std::string path = w.at("path");
      ASSERT_TRUE(ref.contains(path)) << m.at("name") << ": " << path;
      EXPECT_EQ(ref.entry(path).shape, w.at("shape").get<Shape>()) << path;
      if (w.at("trainable")) {
        EXPECT_TRUE(ref.contains("grad/" + path)) << path;
      }
    }
    for (const json& in : m.at("inputs"))
      EXPECT_TRUE(ref.contains("input/" + std::string(in.at("name")))) << m.at("name");
    for (const std::string out : m.at("outputs")) {
      EXPECT_TRUE(ref.contains("output/" + out)) << m.at("name");
      EXPECT_TRUE(ref.contains("target/" + out)) << m.at("name");
    }
    EXPECT_TRUE(ref.contains("loss")) << m.at("name");
  }
}

}  // namespace
}  // namespace autoshard
