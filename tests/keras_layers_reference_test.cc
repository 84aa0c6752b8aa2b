// Keras layers against TensorFlow.js (tests/data/keras_layers, written by
// tools/keras_fixtures/make_fixtures.mjs): each fixture model is built here
// by hand from its Keras 3 spec in index.json, given the fixture's weights,
// and compared on one device (inference outputs, the training-mode loss, the
// gradient of every weight and input, 4 steps of Adam, SGD with momentum and
// RMSprop) and on the meshes model=3, model=4 and data=2,model=2 (outputs,
// Adam's losses and weights after its steps), laid out by AutoShard and by a
// layout map that splits every weight's last axis over "model".
//
// A model needing a layer, an option, a loss or an optimizer that autoshard
// does not have yet is skipped with GTEST_SKIP naming what is missing.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/recurrent_layers.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/executor.h"

namespace autoshard {
namespace {

using nlohmann::json;

const std::string kDir = std::string(AUTOSHARD_TEST_DATA) + "/keras_layers";

// Tolerances of the issue: relative to the largest magnitude of the expected
// tensor (outputs, gradients, weights) or to the loss itself.
constexpr double kOutputTolerance = 1e-5, kGradientTolerance = 1e-4, kLossTolerance = 1e-4;

const json& fixture_index() {
  static const json index = [] {
    std::ifstream in(kDir + "/index.json");
    AS_CHECK(in.good(), "cannot read ", kDir, "/index.json: run tools/keras_fixtures");
    return json::parse(in);
  }();
  return index;
}

const json& spec_of(const std::string& name) {
  for (const json& m : fixture_index().at("models"))
    if (m.at("name") == name) return m;
  fail("no fixture model '", name, "' in ", kDir, "/index.json");
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  try {
    for (const json& m : fixture_index().at("models")) names.push_back(m.at("name"));
  } catch (const std::exception&) {
    names.push_back("index_json_unreadable");  // fails loudly in spec_of
  }
  return names;
}

// Why a fixture cannot be built yet ("" when it can).
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

// LSTM, GRU and SimpleRNN, alone or inside Bidirectional. return_state's
// several outputs reach a functional model only through nodes with ":k".
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

std::optional<Layer> make_recurrent(const json& l, Missing& /*missing*/) {
  if (l.at("class_name") == "Bidirectional") {
    std::optional<RecurrentLayer> inner = make_rnn(l.at("config").at("layer"));
    if (!inner) return std::nullopt;
    return Bidirectional(
        *inner,
        BidirectionalOptions().merge_mode(l.at("config").at("merge_mode")).name(l.at("name")));
  }
  if (std::optional<RecurrentLayer> rnn = make_rnn(l)) return Layer(*rnn);
  return std::nullopt;
}

// The C++ layer of one Keras 3 layer spec, or nullopt with `missing` set.
std::optional<Layer> make_layer(const json& l, Missing& missing) {
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
  if (std::optional<Layer> rnn = make_recurrent(l, missing)) return rnn;
  missing.note("layer " + cls);
  return std::nullopt;
}

// A loss of the spec as a traced function, or null with `missing` set.
Loss make_loss(const json& loss, Missing& missing) {
  const std::string name = loss.at("name");
  if (name == "mean_squared_error") return losses::mean_squared_error;
  if (name == "sparse_categorical_crossentropy" && loss.value("from_logits", false))
    return losses::sparse_categorical_crossentropy;
  missing.note("loss " + loss.dump());
  return nullptr;
}

std::shared_ptr<Optimizer> make_optimizer(const std::string& name, Missing& missing) {
  const json& o = fixture_index().at("optimizers").at(name);
  if (name == "adam")
    return Adam({.learning_rate = o.at("learning_rate"),
                 .beta_1 = o.at("beta_1"),
                 .beta_2 = o.at("beta_2"),
                 .epsilon = o.at("epsilon")});
  if (name == "sgd_momentum")
    return SGD({.learning_rate = o.at("learning_rate"),
                .momentum = o.at("momentum"),
                .nesterov = o.at("nesterov")});
  missing.note("optimizer " + std::string(o.at("class_name")));
  return nullptr;
}

// One fixture: its spec, its reference tensors and the model built from them.
struct Fixture {
  const json& spec;
  SafetensorsFile ref;
  Missing missing;
  std::unique_ptr<Model> model;
  Loss loss;

  explicit Fixture(const std::string& name)
      : spec(spec_of(name)), ref(kDir + "/" + std::string(spec.at("file"))) {
    build();
  }

  void build() {
    std::map<std::string, SymbolicTensor> tensors;
    std::vector<SymbolicTensor> inputs;
    for (const json& in : spec.at("inputs")) {
      Shape shape = in.at("shape").get<Shape>();
      const DType dtype = in.at("dtype") == "int32" ? DType::I32 : DType::F32;
      inputs.push_back(tensors[in.at("name")] = Input(shape, dtype, in.at("name")));
    }
    std::map<std::string, Layer> layers;
    for (const json& l : spec.at("layers"))
      if (std::optional<Layer> made = make_layer(l, missing)) layers.emplace(l.at("name"), *made);
    for (const json& n : nodes()) {
      std::vector<SymbolicTensor> ins;
      for (const std::string id : n.at("inbound")) {
        if (id.find(':') != std::string::npos) missing.note("several outputs of one layer");
        if (tensors.count(id)) ins.push_back(tensors.at(id));
      }
      auto layer = layers.find(n.at("layer"));
      if (!missing.what.empty() || layer == layers.end()) continue;
      tensors[n.value("id", std::string(n.at("layer")))] = layer->second(ins);
    }
    if (spec.at("outputs").size() != 1) missing.note("several outputs");
    loss = make_loss(spec.at("losses").at(0), missing);
    if (!missing.what.empty()) return;
    model = std::make_unique<Model>(inputs, tensors.at(spec.at("outputs").at(0)), spec.at("name"));
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
  std::string output_name() const { return spec.at("outputs").at(0); }
  Tensor target() const { return ref.load("target/" + output_name()); }
  Tensor expected_output() const { return ref.load("output/" + output_name()); }
};

class KerasLayersReference : public ::testing::TestWithParam<std::string> {};

#define BUILD_OR_SKIP(f)                                                              \
  Fixture f(GetParam());                                                              \
  if (!f.model) GTEST_SKIP() << GetParam() << ": autoshard lacks " << f.missing.what; \
  f.load_weights(*f.model)

// Inference outputs, the training-mode loss and every gradient (weights and
// float inputs) on one device.
TEST_P(KerasLayersReference, OutputLossAndGradients) {
  BUILD_OR_SKIP(f);
  for (const json& w : f.spec.at("weights")) EXPECT_EQ(f.cpp_path(w.at("path")).empty(), false);
  EXPECT_EQ(f.model->weight_paths().size(), f.spec.at("weights").size())
      << "the C++ model has weights the Keras model lacks, or the reverse";
  EXPECT_LT(max_relative_error(f.model->predict_on_batch(f.inputs()), f.expected_output()),
            kOutputTolerance);

  Graph g;
  const int64_t batch = f.spec.at("batch");
  Value out = f.model->trace_forward(g, batch, /*training=*/true);
  const Tensor target = f.target();
  Value loss = f.loss(out, g.input("y", target.shape(), target.dtype()));
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
  // The model's inputs are traced as x, x1, x2, ... in the spec's order.
  std::vector<std::pair<int, std::string>> inputs;
  for (size_t k = 0; k < f.spec.at("inputs").size(); ++k)
    inputs.emplace_back(g.find_input(k == 0 ? "x" : "x" + std::to_string(k)),
                        f.spec.at("inputs").at(k).at("name"));
  for (const auto& [id, name] : inputs)
    if (f.ref.contains("grad/input/" + name)) {
      wrt.push_back(g.value(id));
      names.push_back("grad/input/" + name);
    }
  const std::vector<Value> grads = gradients(loss, wrt);
  std::vector<int> outputs{loss.id};
  for (Value v : grads) outputs.push_back(v.id);
  Executor exec(g, outputs);
  for (int id : g.parameters()) exec.bind(id, f.model->gather_weight(g.node(id).leaf().key()));
  for (const auto& [id, name] : inputs) exec.bind(id, f.ref.load("input/" + name));
  exec.bind(g.find_input("y"), target);
  exec.run();

  const double expected_loss = f.ref.load("loss").item();
  EXPECT_NEAR(exec.value(loss.id).item(), expected_loss, kLossTolerance * std::fabs(expected_loss));
  for (size_t i = 0; i < wrt.size(); ++i) {
    const std::string& name = names[i];
    if (!f.ref.contains(name)) continue;  // a non-trainable weight
    const Tensor& grad = exec.value(grads[i].id);
    EXPECT_LT(max_relative_error(grad, f.ref.load(name).reshaped(grad.shape())), kGradientTolerance)
        << name;
  }
}

// Trains a fresh copy of the fixture's model for the fixture's steps with
// `optimizer` (on `dist` when given) and checks each step's loss, then (for
// Adam) every weight after the steps, moving statistics included.
void check_steps(const std::string& model_name, const std::string& optimizer,
                 std::shared_ptr<Distribution> dist, const std::string& what) {
  Fixture f(model_name);
  if (dist) f.model->set_distribution(dist);
  f.load_weights(*f.model);
  EXPECT_LT(max_relative_error(f.model->predict_on_batch(f.inputs()), f.expected_output()),
            kOutputTolerance)
      << what;
  Missing missing;
  f.model->compile(make_optimizer(optimizer, missing), f.loss);
  const Tensor target = f.target();
  const std::vector<float> expected = f.ref.load("steps/" + optimizer).to_vector();
  for (size_t step = 0; step < expected.size(); ++step)
    EXPECT_NEAR(f.model->train_on_batch(f.inputs(), target), expected[step],
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

// Optimizer steps on one device, for each optimizer autoshard has.
TEST_P(KerasLayersReference, OptimizerStepsOnOneDevice) {
  BUILD_OR_SKIP(f);
  if (f.spec.at("weights").empty()) GTEST_SKIP() << GetParam() << " has no weights to train";
  std::vector<std::string> lacking;
  for (const std::string optimizer : {"adam", "sgd_momentum", "rmsprop"}) {
    Missing missing;
    if (!make_optimizer(optimizer, missing)) {
      lacking.push_back(missing.what);
      continue;
    }
    check_steps(GetParam(), optimizer, nullptr, "one device");
  }
  if (!lacking.empty()) GTEST_SKIP() << "checked all but: autoshard lacks " << lacking.front();
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

// On meshes: outputs, Adam's losses and weights, laid out by AutoShard and by
// the layout map; uneven everywhere (odd sizes over 3 and 4 devices, a batch
// of 3 over 2).
TEST_P(KerasLayersReference, MeshesMatchTensorFlowJs) {
  BUILD_OR_SKIP(f);
  const bool trains = !f.spec.at("weights").empty();
  for (const char* spec : {"model=3", "model=4", "data=2,model=2"}) {
    const DeviceMesh mesh = DeviceMesh::parse(spec);
    const std::vector<std::pair<std::string, std::shared_ptr<Distribution>>> plans = {
        {"autoshard",
         std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.1})},
        {"layout map", std::make_shared<ModelParallel>(mesh, last_axis_over_model(*f.model))}};
    for (const auto& [plan, dist] : plans) {
      const std::string what = plan + " on " + spec;
      if (trains) {
        check_steps(GetParam(), "adam", dist, what);
        continue;
      }
      Fixture g(GetParam());
      g.model->set_distribution(dist);
      EXPECT_LT(max_relative_error(g.model->predict_on_batch(g.inputs()), g.expected_output()),
                kOutputTolerance)
          << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, KerasLayersReference, ::testing::ValuesIn(model_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// The fixtures are what the tests say they are: every model's file holds
// its weights, inputs, targets, outputs and loss, and the set stays small.
TEST(KerasLayersFixtures, EveryModelHasItsTensors) {
  const json& index = fixture_index();
  EXPECT_GE(index.at("models").size(), 80u);
  for (const json& m : index.at("models")) {
    SafetensorsFile ref(kDir + "/" + std::string(m.at("file")));
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
