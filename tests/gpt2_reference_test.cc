// autoshard's GPT-2 against PyTorch (tests/data/gpt2_reference.safetensors,
// written by tools/make_gpt2_reference.py): logits, loss, every gradient, and
// 10 AdamW steps with gradient clipping.
#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/io/safetensors.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/nn/losses.h"
#include "autoshard/tensor/array_split.h"
#include "test_util.h"

namespace autoshard {
namespace {

const std::string kReference = std::string(AUTOSHARD_TEST_DATA) + "/gpt2_reference.safetensors";

struct Gpt2Fixture {
  SafetensorsFile ref{kReference};
  Tensor x = ref.load("x"), y = ref.load("y");
  GPT2 model{GPT2Config::preset("test"), x.dim(1)};

  Gpt2Fixture() {
    for (const std::string& path : model.weight_paths())
      model.set_weight(path, ref.load("w." + path));
  }
};

// Every reference weight is used, except the key biases: autoshard's GPT-2
// has none, since softmax ignores them (the logits still match).
TEST(GPT2Reference, EveryWeightIsInTheReference) {
  Gpt2Fixture f;
  int count = 0;
  for (const auto& e : f.ref.entries())
    if (e.name.rfind("w.", 0) == 0 && e.name.find("attn.key.bias") == std::string::npos) ++count;
  EXPECT_EQ(static_cast<int>(f.model.weight_paths().size()), count);
}

TEST(GPT2Reference, LogitsAndLoss) {
  Gpt2Fixture f;
  Tensor logits = f.model.predict_on_batch(f.x);
  EXPECT_LT(max_relative_error(logits, f.ref.load("logits")), 1e-5);
  f.model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  double loss = f.model.test_on_batch(f.x, f.y);
  EXPECT_NEAR(loss, f.ref.load("loss").item(), 1e-5 * f.ref.load("loss").item());
}

TEST(GPT2Reference, EveryGradient) {
  Gpt2Fixture f;
  for (const auto& [path, grad] : testing::loss_gradients(f.model, f.x, f.y))
    EXPECT_LT(max_relative_error(grad, f.ref.load("grad." + path)), 1e-4) << path;
}

TEST(GPT2Reference, TenAdamWStepsWithClipping) {
  Gpt2Fixture f;
  f.model.compile(
      AdamW({.learning_rate = 3e-3, .beta_2 = 0.95, .weight_decay = 0.1, .clipnorm = 1.0}),
      losses::sparse_categorical_crossentropy);
  std::vector<float> expected = f.ref.load("adamw_losses").to_vector();
  for (size_t step = 0; step < expected.size(); ++step) {
    double loss = f.model.train_on_batch(f.x, f.y);
    EXPECT_NEAR(loss, expected[step], 1e-4 * expected[step]) << "step " << step + 1;
  }
  for (const std::string& path : f.model.weight_paths()) {
    EXPECT_LT(max_relative_error(f.model.gather_weight(path), f.ref.load("after." + path)), 1e-4)
        << path;
  }
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// Shapes with size-1 dims take other GEMM paths (free strides); the rows of a
// batch must not depend on the batch size.
TEST(GPT2Reference, BatchOfOneMatchesRowOfBatch) {
  Gpt2Fixture f;
  Tensor both = f.model.predict_on_batch(f.x);
  for (int64_t row = 0; row < f.x.dim(0); ++row) {
    Tensor one = f.model.predict_on_batch(slice_axis(f.x, 0, row, 1));
    EXPECT_LT(max_relative_error(one, slice_axis(both, 0, row, 1)), 1e-5) << "row " << row;
  }
}

}  // namespace
}  // namespace autoshard
