// Model::set_frozen, set_regularizers and set_constraints (Keras's
// trainable = False, regularizers and constraints): against hand-computed
// values, and on data=2,model=2 against one device.
#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/nn/model.h"
#include "autoshard/nn/regularizers.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::random_tensor;

std::unique_ptr<Model> base_and_head(const std::string& mesh) {
  auto in = Input({6});
  Dense base(8, DenseOptions().name("base").activation("tanh"));
  Dense head(3, DenseOptions().name("head"));
  auto model = std::make_unique<Model>(std::vector<SymbolicTensor>{in}, head(base(in)));
  model->set_seed(5);
  if (!mesh.empty())
    model->set_distribution(
        std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data", AutoShardOptions{}));
  return model;
}

double sum_of_squares(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += double(t.f32()[i]) * t.f32()[i];
  return s;
}

TEST(FrozenLayers, TakeNoStepNorSlotAndTheRestTrainAsOnOneDevice) {
  const Tensor x = random_tensor({10, 6}, 1), y = random_tensor({10, 3}, 2);
  std::vector<Tensor> one_device;
  for (const char* mesh : {"", "data=2,model=2"}) {
    SCOPED_TRACE(mesh);
    auto model = base_and_head(mesh);
    model->set_frozen({"base"});
    model->compile(Adam(), losses::MeanSquaredError());
    const Tensor base = model->gather_weight("base.kernel").clone();
    model->fit(x, y, {.batch_size = 4, .epochs = 2, .verbose = false});
    EXPECT_EQ(max_abs_diff(model->gather_weight("base.kernel"), base), 0.0);
    EXPECT_EQ(model->non_trainable_weight_paths(),
              (std::vector<std::string>{"base.kernel", "base.bias"}));
    for (const std::string& slot : model->slot_paths())
      EXPECT_EQ(slot.find(".base."), std::string::npos) << slot;
    const Tensor head = model->gather_weight("head.kernel").clone();
    if (one_device.empty())
      one_device.push_back(head);
    else
      EXPECT_LT(max_abs_diff(head, one_device[0]), 1e-5);
  }
}

TEST(Regularizers, AddTheirPenaltyToTheLoss) {
  const Tensor x = random_tensor({10, 6}, 3), y = random_tensor({10, 3}, 4);
  auto plain = base_and_head("");
  plain->compile(SGD(), losses::MeanSquaredError());
  auto penalized = base_and_head("");
  penalized->set_regularizers({{"head.kernel", regularizers::l1_l2(0, 0.25)}}, {});
  penalized->compile(SGD(), losses::MeanSquaredError());
  const double penalty = 0.25 * sum_of_squares(penalized->gather_weight("head.kernel"));
  EXPECT_NEAR(penalized->test_on_batch(x, y), plain->test_on_batch(x, y) + penalty, 1e-5);
}

TEST(Constraints, HoldAfterEveryStepOnAnyMesh) {
  const Tensor x = random_tensor({10, 6}, 5), y = random_tensor({10, 3}, 6);
  std::vector<Tensor> one_device;
  for (const char* mesh : {"", "data=2,model=2"}) {
    SCOPED_TRACE(mesh);
    auto model = base_and_head(mesh);
    model->set_constraints(
        {{"base.kernel", constraints::max_norm(0.2, {0})}, {"head.bias", constraints::non_neg()}});
    model->compile(SGD({.learning_rate = 0.5}), losses::MeanSquaredError());
    for (int step = 0; step < 3; ++step) {
      model->train_on_batch(x, y);
      const Tensor k = model->gather_weight("base.kernel");
      for (int64_t c = 0; c < 8; ++c) {
        double norm = 0;
        for (int64_t r = 0; r < 6; ++r) norm += double(k.f32()[r * 8 + c]) * k.f32()[r * 8 + c];
        EXPECT_LE(std::sqrt(norm), 0.2 + 1e-6);
      }
      const Tensor b = model->gather_weight("head.bias");
      for (int64_t i = 0; i < b.numel(); ++i) EXPECT_GE(b.f32()[i], 0.0f);
    }
    const Tensor k = model->gather_weight("base.kernel").clone();
    if (one_device.empty())
      one_device.push_back(k);
    else
      EXPECT_LT(max_abs_diff(k, one_device[0]), 1e-6);
  }
}

}  // namespace
}  // namespace autoshard
