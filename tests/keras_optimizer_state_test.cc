// Optimizer state in Keras files (src/io/keras/optimizer_state.h): N steps,
// save, load and M more steps equal N + M steps in one run, for `.keras`,
// `.h5` and TensorFlow.js files, Adam and SGD with momentum; the real Keras
// 3 and Keras 2 files' optimizer variables are read in Keras's order.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/safetensors.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const std::string kData = AUTOSHARD_TEST_DATA;
const std::string kShared = kData + "/../../../shared/keras-files";

struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~ScratchDir() { fs::remove_all(path); }
};

// batch_normalization_dense: Dense, BatchNormalization (non-trainable moving
// statistics between the trainable weights), Dense; MSE.
struct Batch {
  Tensor x, y;
};
Batch fixture_batch() {
  SafetensorsFile ref(kData + "/keras_layers/batch_normalization_dense.safetensors");
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

struct Case {
  std::string file, out, optimizer;
};

TEST(KerasOptimizerState, ResumeEqualsOneRun) {
  const std::string dir = kData + "/keras_files/batch_normalization_dense";
  const std::string tfjs = kData + "/keras_layers/tfjs/batch_normalization_dense.json";
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
  KerasModel k = load_keras_model(kData + "/keras_files/batch_normalization_dense.h5");
  compile_with(k, "Adam");
  train(k, batch, 0, 1);
  k.compile.optimizer = "SGD";  // the config now names another optimizer than the state's
  k.compile.optimizer_config = {{"learning_rate", 0.05}, {"momentum", 0.9}};
  save_keras_model(k, (scratch.path / "m.h5").string());
  KerasModel back = load_keras_model((scratch.path / "m.h5").string(), {.optimizer_state = true});
  EXPECT_FALSE(back.has_optimizer_state);
  EXPECT_EQ(back.optimizer_state_note, "the file holds no optimizer state");
}

// Real files: Keras 3 (.keras, 3.4 to 3.15) lists iteration, learning_rate
// and each variable's momentum and velocity; Keras 2.3 iterations, all m,
// all v and placeholders; Keras 3's legacy .h5 its own variables.
TEST(KerasOptimizerState, RealFiles) {
  if (!fs::exists(kShared)) GTEST_SKIP() << "no " << kShared;
  for (const std::string file : {"fashion_cnn.keras", "gru_forecast.keras", "bi_lstm.keras",
                                 "lenet5.h5", "next_word_lstm.h5"}) {
    SCOPED_TRACE(file);
    KerasModel k =
        load_keras_model(kShared + "/" + file, {.optimizer_state = true, .inference = true});
    EXPECT_TRUE(k.has_optimizer_state) << k.optimizer_state_note;
    EXPECT_GT(k.iterations, 0);
    // The moments are read (and so checked for NaN) like weights.
    for (const std::string& slot : k.model->slot_paths())
      EXPECT_GT(k.model->gather_weight(slot).numel(), 0);
  }
  // This one's compile config names no optimizer (its state says Adam):
  // the state is not guessed at.
  KerasModel k = load_keras_model(kShared + "/cnn_lstm_forecast.keras",
                                  {.optimizer_state = true, .inference = true});
  EXPECT_FALSE(k.has_optimizer_state);
  EXPECT_EQ(k.optimizer_state_note, "the compile config names no optimizer");
}

}  // namespace
}  // namespace autoshard
