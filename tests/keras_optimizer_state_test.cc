// Optimizer state in Keras files (src/io/keras/optimizer_state.h): N steps,
// save, load and M more steps equal N + M steps in one run, for `.keras`,
// `.h5` and TensorFlow.js files, Adam and SGD with momentum; the real Keras
// 3 and Keras 2 files' optimizer variables are read in Keras's order. And
// Adam's epsilon where each format puts it, against NumPy's steps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/npy.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/nn/layers.h"
#include "cli_runner.h"
#include "keras_fixtures.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kSharedKerasFiles;

using testing::ScratchDir;

namespace fs = std::filesystem;
using nlohmann::json;

using testing::kTestData;

// batch_normalization_dense: Dense, BatchNormalization (non-trainable moving
// statistics between the trainable weights), Dense; MSE.
struct Batch {
  Tensor x, y;
};
Batch fixture_batch() {
  SafetensorsFile ref(kTestData + "/keras_layers/batch_normalization_dense.safetensors");
  return {ref.load("input/x"), ref.load("target/head")};
}

void compile_with(KerasModel& k, const std::string& optimizer) {
  k.compile.present = true;
  k.compile.losses = {{{"name", "mean_squared_error"}}};
  k.compile.optimizer = optimizer;
  k.compile.optimizer_config = optimizer == "SGD" ? json{{"learning_rate", 0.05}, {"momentum", 0.9}}
                                                  : json{{"learning_rate", 0.02}};
  k.model->compile(k.compile.make_optimizer(), k.compile.make_losses(), k.compile.loss_weights, {});
}

std::vector<Tensor> weights_of(KerasModel& k) {
  std::vector<Tensor> out;
  for (const KerasWeightName& w : k.weight_names) out.push_back(k.model->gather_weight(w.cpp));
  return out;
}

// Steps on batches that differ from step to step (the rows rotate).
void train(KerasModel& k, const Batch& b, int from, int to) {
  for (int s = from; s < to; ++s) {
    Tensor x = b.x.clone();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) x.f32()[i] = b.x.f32()[(i + s * 7) % n];
    k.model->train_on_batch(x, b.y);
  }
}

struct OptimizerStateCase {
  std::string file, out, optimizer;
};

TEST(KerasOptimizerState, ResumeEqualsOneRun) {
  const std::string dir = kTestData + "/keras_files/batch_normalization_dense";
  const std::string tfjs = kTestData + "/keras_layers/tfjs/batch_normalization_dense.json";
  const Batch batch = fixture_batch();
  const int n = 3, m = 2;
  ScratchDir scratch("keras_optimizer_state");
  for (const std::string optimizer : {"Adam", "SGD"}) {
    for (const auto& [file, out] : std::vector<std::pair<std::string, std::string>>{
             {dir + ".keras", "m.keras"}, {dir + ".h5", "m.h5"}, {tfjs, "tfjs_out"}}) {
      SCOPED_TRACE(optimizer + ": " + file + " -> " + out);
      KerasModel whole = load_keras_model(file);
      compile_with(whole, optimizer);
      train(whole, batch, 0, n + m);

      KerasModel first = load_keras_model(file);
      compile_with(first, optimizer);
      train(first, batch, 0, n);
      const fs::path saved = scratch.path / (optimizer + "_" + out);
      save_keras_model(first, saved.string());

      KerasModel resumed = load_keras_model(saved.string(), {.optimizer_state = true});
      ASSERT_TRUE(resumed.has_optimizer_state) << resumed.optimizer_state_note;
      EXPECT_EQ(resumed.iterations, n);
      EXPECT_EQ(resumed.model->iterations(), n);
      EXPECT_EQ(resumed.compile.optimizer, optimizer);
      resumed.model->compile(resumed.compile.make_optimizer(), resumed.compile.make_losses(),
                             resumed.compile.loss_weights, {});
      train(resumed, batch, n, n + m);

      const std::vector<Tensor> want = weights_of(whole), got = weights_of(resumed);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        SCOPED_TRACE(whole.weight_names[i].cpp);
        // Adam's moments are stored as they are: the same bits. Keras keeps
        // SGD's momentum as -lr u, which rounds once each way.
        if (optimizer == "Adam" || out == "tfjs_out")
          EXPECT_EQ(max_abs_diff(got[i], want[i]), 0.0);
        else
          EXPECT_LT(max_relative_error(got[i], want[i]), 1e-6);
      }
      // Without its state the same resume differs (the moments matter).
      KerasModel fresh = load_keras_model(saved.string());
      EXPECT_FALSE(fresh.has_optimizer_state);
      fresh.model->compile(fresh.compile.make_optimizer(), fresh.compile.make_losses(),
                           fresh.compile.loss_weights, {});
      train(fresh, batch, n, n + m);
      EXPECT_GT(max_abs_diff(weights_of(fresh).front(), want.front()), 1e-6);
    }
  }
}

// State is written only for the optimizer the compile config names: after
// the config changed to another optimizer, none is written.
TEST(KerasOptimizerState, OnlyTheConfiguredOptimizersStateIsWritten) {
  const Batch batch = fixture_batch();
  ScratchDir scratch("keras_optimizer_other");
  KerasModel k = load_keras_model(kTestData + "/keras_files/batch_normalization_dense.h5");
  compile_with(k, "Adam");
  train(k, batch, 0, 1);
  k.compile.optimizer = "SGD";  // the config now names another optimizer than the state's
  k.compile.optimizer_config = {{"learning_rate", 0.05}, {"momentum", 0.9}};
  save_keras_model(k, (scratch.path / "m.h5").string());
  KerasModel back = load_keras_model((scratch.path / "m.h5").string(), {.optimizer_state = true});
  EXPECT_FALSE(back.has_optimizer_state);
  EXPECT_EQ(back.optimizer_state_note, "the file holds no optimizer state");
}

// TF.js's optimizers take every key from the config (the learning rate and
// Adam's betas have no default there): a config given only by name, as
// --optimizer adam makes it, is written with Keras's defaults, which
// TensorFlow.js then loads (tools/keras_fixtures/reload_saved.mjs).
TEST(KerasOptimizerState, TfjsTrainingConfigSpellsOutDefaults) {
  ScratchDir scratch("keras_optimizer_tfjs_defaults");
  KerasModel k = load_keras_model(kTestData + "/keras_layers/tfjs/batch_normalization_dense.json");
  compile_with(k, "Adam");
  k.compile.optimizer_config = json::object();
  save_keras_model(k, (scratch.path / "out").string());
  std::ifstream in(scratch.path / "out" / "model.json");
  const json config = json::parse(in).at("trainingConfig").at("optimizer_config").at("config");
  EXPECT_EQ(config, json({{"learningRate", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}}));
}

// Real files: Keras 3 (.keras, 3.4 to 3.15) lists iteration, learning_rate
// and each variable's momentum and velocity; Keras 2.3 iterations, all m,
// all v and placeholders; Keras 3's legacy .h5 its own variables.
TEST(KerasOptimizerState, RealFiles) {
  if (!fs::exists(kSharedKerasFiles)) GTEST_SKIP() << "no " << kSharedKerasFiles;
  for (const std::string file : {"fashion_cnn.keras", "gru_forecast.keras", "bi_lstm.keras",
                                 "lenet5.h5", "next_word_lstm.h5"}) {
    SCOPED_TRACE(file);
    KerasModel k = load_keras_model(kSharedKerasFiles + "/" + file,
                                    {.optimizer_state = true, .inference = true});
    EXPECT_TRUE(k.has_optimizer_state) << k.optimizer_state_note;
    EXPECT_GT(k.iterations, 0);
    // The moments are read (and so checked for NaN) like weights.
    for (const std::string& slot : k.model->slot_paths())
      EXPECT_GT(k.model->gather_weight(slot).numel(), 0);
  }
  // This one's compile config names no optimizer (its state says Adam).
  // Keras 3 compiles it with compile's default, RMSprop, and skips the
  // saved state, which is another optimizer's: so does autoshard.
  KerasModel k = load_keras_model(kSharedKerasFiles + "/cnn_lstm_forecast.keras",
                                  {.optimizer_state = true, .inference = true});
  EXPECT_EQ(k.compile.optimizer, "RMSprop");
  EXPECT_FALSE(k.has_optimizer_state);
  EXPECT_EQ(k.optimizer_state_note, "autoshard does not read RMSprop's state");
}

// The command line: `train --model F --save OUT` for one epoch, then
// `train --model OUT` for two more steps, equals three + two steps in one
// run (the same weights, bitwise on one device; 1e-5 when the second part
// runs on data=2,model=2). The TF.js fixture names no optimizer: the first
// run's --optimizer is what its save records and the resume takes; its
// --loss is Keras's short name "mse", as the help offers it.
TEST(KerasOptimizerState, CommandLineResumesFromSave) {
  ScratchDir dir("keras_optimizer_cli");
  const auto path = [&](const std::string& f) { return (dir.path / f).string(); };
  {
    std::ofstream(path("x.npy")) << npy_bytes(testing::random_tensor({12, 7}, 1));
    std::ofstream(path("y.npy")) << npy_bytes(testing::random_tensor({12, 3}, 2));
  }
  const std::string data = " --x " + path("x.npy") + " --y " + path("y.npy") +
                           " --batch 4 --sampling sequential --verbose 0 ";
  const std::string stem = kTestData + "/keras_files/batch_normalization_dense";
  const std::string tfjs = kTestData + "/keras_layers/tfjs/batch_normalization_dense.json";
  for (const auto& [file, out, flags] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {stem + ".keras", "a.keras", ""},
           {stem + ".h5", "a.h5", ""},
           {tfjs, "a_tfjs", "--optimizer adam --loss mse "}}) {
    SCOPED_TRACE(file);
    const std::string whole = path("whole_" + out), first = path("first_" + out);
    cli_runner::Result r =
        cli_runner::run("train --model " + file + data + flags + "--steps 5 --save " + whole);
    ASSERT_EQ(r.code, 0) << r.output;
    r = cli_runner::run("train --model " + file + data + flags + "--steps 3 --save " + first);
    ASSERT_EQ(r.code, 0) << r.output;
    for (const std::string mesh : {"", "--mesh data=2,model=2 "}) {
      SCOPED_TRACE(mesh);
      const std::string rest = path("rest_" + std::to_string(mesh.size()) + "_" + out);
      r = cli_runner::run("train --model " + first + data + mesh + "--steps 2 --save " + rest);
      ASSERT_EQ(r.code, 0) << r.output;
      EXPECT_NE(r.output.find("resumed from the file's state after 3 steps"), std::string::npos)
          << r.output;
      KerasModel a = load_keras_model(whole), b = load_keras_model(rest);
      for (const KerasWeightName& w : a.weight_names) {
        const Tensor want = a.model->gather_weight(w.cpp), got = b.model->gather_weight(w.cpp);
        if (mesh.empty())
          EXPECT_EQ(max_abs_diff(got, want), 0.0) << w.cpp;
        else
          EXPECT_LT(max_relative_error(got, want), 1e-5) << w.cpp;
      }
    }
  }
}

Tensor tensor_of(const json& rows) {
  std::vector<float> values;
  Shape shape = {static_cast<int64_t>(rows.size())};
  for (const json& r : rows) {
    if (r.is_array()) {
      if (shape.size() == 1) shape.push_back(static_cast<int64_t>(r.size()));
      for (const json& v : r) values.push_back(v.get<float>());
    } else {
      values.push_back(r.get<float>());
    }
  }
  return Tensor::from(shape, values);
}

// Keras 3 adds Adam's epsilon before the bias correction, TF.js after it:
// each format's compile config says which, and the update follows it.
// tools/keras_files/adam_epsilon_reference.py steps both in NumPy from
// Keras's and TF.js's sources (epsilon 0.1, where the two differ by 20%).
TEST(KerasAdamEpsilon, EachFormatsPlacementMatchesNumPy) {
  std::ifstream in(kTestData + "/keras_files/adam_epsilon.json");
  const json ref = json::parse(in);
  const json& o = ref.at("optimizer");
  EXPECT_EQ(load_keras_model(kTestData + "/keras_files/two_outputs.keras").compile.epsilon,
            "before");
  EXPECT_EQ(load_keras_model(kTestData + "/keras_files/two_outputs.h5").compile.epsilon, "before");
  EXPECT_EQ(load_keras_model(kTestData + "/keras_layers/tfjs/two_outputs.json").compile.epsilon,
            "after");
  const Tensor x = tensor_of(ref.at("x")), y = tensor_of(ref.at("y"));
  for (const std::string placement : {"before", "after"}) {
    SCOPED_TRACE(placement);
    KerasCompileConfig c;
    c.present = true;
    c.optimizer = "Adam";
    c.optimizer_config = {{"learning_rate", o.at("learning_rate")},
                          {"beta_1", o.at("beta_1")},
                          {"beta_2", o.at("beta_2")},
                          {"epsilon", o.at("epsilon")}};
    c.losses = {{{"name", "mean_squared_error"}}};
    c.epsilon = placement;
    auto input = Input({3});
    Model model({input}, Dense(2, DenseOptions().name("d"))(input));
    model.set_weight("d.kernel", tensor_of(ref.at("kernel")));
    model.set_weight("d.bias", tensor_of(ref.at("bias")));
    model.compile(c.make_optimizer(), c.make_losses(), {}, {});
    const json& want = ref.at(placement);
    for (int step = 0; step < o.at("steps").get<int>(); ++step)
      EXPECT_NEAR(model.train_on_batch(x, y), want.at("losses").at(step).get<double>(), 1e-6);
    EXPECT_LT(max_relative_error(model.gather_weight("d.kernel"), tensor_of(want.at("kernel"))),
              1e-5);
    EXPECT_LT(max_relative_error(model.gather_weight("d.bias"), tensor_of(want.at("bias"))), 1e-5);
  }
  KerasCompileConfig bad;
  bad.optimizer = "Adam";
  bad.epsilon = "inside";
  EXPECT_THROW(bad.make_optimizer(), Error);
}

}  // namespace
}  // namespace autoshard
