// The Keras-style API: functional and Sequential models, fit / evaluate /
// predict, and the optimizers' update rules against hand-computed values.
#include "autoshard/nn/model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/error.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::random_tensor;

// y = x @ w_true + 0.5: a problem a Dense layer solves exactly.
void linear_problem(Tensor& x, Tensor& y) {
  x = random_tensor({64, 3}, 1);
  y = Tensor({64, 1});
  const float w[3] = {1.5f, -2.0f, 0.25f};
  for (int64_t i = 0; i < 64; ++i) {
    float s = 0.5f;
    for (int k = 0; k < 3; ++k) s += x.f32()[i * 3 + k] * w[k];
    y.f32()[i] = s;
  }
}

TEST(Model, FunctionalFitLearnsALinearMap) {
  Tensor x, y;
  linear_problem(x, y);
  auto in = Input({3});
  Model model({in}, Dense(1, DenseOptions().name("out"))(in));
  model.compile(SGD({.learning_rate = 0.1, .momentum = 0.9}), losses::mean_squared_error);
  History h = model.fit(x, y, {.batch_size = 16, .epochs = 40, .verbose = false});
  ASSERT_EQ(h.loss.size(), 40u);
  EXPECT_LT(h.loss.back(), 1e-4);
  EXPECT_LT(model.evaluate(x, y, 10), 1e-4);  // last batch of 4 is partial
  EXPECT_NEAR(model.gather_weight("out.kernel").f32()[0], 1.5f, 1e-2);
  EXPECT_NEAR(model.gather_weight("out.bias").f32()[0], 0.5f, 1e-2);
  EXPECT_EQ(model.predict(x, 48).shape(), (Shape{64, 1}));
}

TEST(Model, SequentialMatchesFunctional) {
  auto in = Input({5});
  Model functional({in}, Dense(2, DenseOptions().name("b"))(
                             Dense(4, DenseOptions().name("a").activation("gelu"))(in)));
  Sequential sequential(Input({5}), {Dense(4, DenseOptions().name("a").activation("gelu")),
                                     Dense(2, DenseOptions().name("b"))});
  EXPECT_EQ(functional.weight_paths(), sequential.weight_paths());
  for (const std::string& p : functional.weight_paths())
    EXPECT_EQ(max_abs_diff(functional.gather_weight(p), sequential.gather_weight(p)), 0.0)
        << "same seed, same path";
  Tensor x = random_tensor({3, 5}, 9);
  EXPECT_LT(max_abs_diff(functional.predict(x), sequential.predict(x)), 1e-7);
}

TEST(Model, DropoutOnlyWhileTrainingAndDeterministic) {
  auto in = Input({200});
  Model model({in}, Dropout(0.5, 3)(in));
  model.compile(SGD(), losses::mean_squared_error);
  Tensor x = Tensor::full({1, 200}, 1.0f);
  EXPECT_EQ(max_abs_diff(model.predict(x), x), 0.0);  // inference: identity
}

// One Adam step on a single weight against the formula written out.
TEST(Optimizers, AdamAndAdamWFollowPyTorch) {
  for (bool decoupled : {false, true}) {
    auto in = Input({1});
    Model model({in}, Dense(1, DenseOptions().use_bias(false).name("d").kernel_initializer(
                                   Initializer::constant(2.0)))(in));
    const double lr = 0.1, b1 = 0.8, b2 = 0.9, eps = 1e-8, wd = 0.05;
    model.compile(decoupled ? AdamW({lr, b1, b2, eps, wd}) : Adam({lr, b1, b2, eps, wd}),
                  losses::mean_squared_error);
    Tensor x = Tensor::from({1, 1}, {3.0f}), y = Tensor::from({1, 1}, {1.0f});
    double p = 2.0, m = 0, v = 0;
    for (int t = 1; t <= 3; ++t) {
      double g = 2 * (p * 3 - 1) * 3;  // d/dp (3p - 1)^2
      if (decoupled)
        p *= 1 - 0.1 * 0.05;
      else
        g += 0.05 * p;
      m = 0.8 * m + 0.2 * g;
      v = 0.9 * v + 0.1 * g * g;
      p -= 0.1 / (1 - std::pow(0.8, t)) * m /
           (std::sqrt(v) / std::sqrt(1 - std::pow(0.9, t)) + 1e-8);
      model.train_on_batch(x, y);
      EXPECT_NEAR(model.gather_weight("d.kernel").f32()[0], p, 1e-5)
          << "step " << t << " decoupled " << decoupled;
    }
  }
}

// AdamW({.learning_rate = ...}) keeps PyTorch's default decoupled decay of
// 0.01: with a zero gradient one step scales the weight by 1 - lr * 0.01.
TEST(Optimizers, AdamWDefaultsToPyTorchsWeightDecay) {
  auto in = Input({1});
  Model model({in}, Dense(1, DenseOptions().use_bias(false).name("d").kernel_initializer(
                                 Initializer::constant(2.0)))(in));
  model.compile(AdamW({.learning_rate = 0.5}), losses::mean_squared_error);
  Tensor x = Tensor::from({1, 1}, {0.0f}), y = Tensor::from({1, 1}, {0.0f});  // gradient 0
  model.train_on_batch(x, y);
  EXPECT_NEAR(model.gather_weight("d.kernel").f32()[0], 2.0 * (1 - 0.5 * 0.01), 1e-6);
}

TEST(Initializers, NormalTakesMeanThenStddevAsKeras) {
  Tensor t = Initializer::normal(5.0, 0.1).make("w", {4000}, 0);
  double mean = 0, var = 0;
  for (float v : t.to_vector()) mean += v / 4000.0;
  for (float v : t.to_vector()) var += (v - mean) * (v - mean) / 4000.0;
  EXPECT_NEAR(mean, 5.0, 0.02);
  EXPECT_NEAR(std::sqrt(var), 0.1, 0.01);
}

TEST(Optimizers, SgdNesterovAndClipping) {
  auto in = Input({1});
  Model model({in}, Dense(1, DenseOptions().use_bias(false).name("d").kernel_initializer(
                                 Initializer::constant(2.0)))(in));
  model.compile(SGD({.learning_rate = 0.01,
                     .momentum = 0.9,
                     .weight_decay = 0.1,
                     .clipnorm = 4.0,
                     .nesterov = true}),
                losses::mean_squared_error);
  Tensor x = Tensor::from({1, 1}, {3.0f}), y = Tensor::from({1, 1}, {1.0f});
  double p = 2.0, buf = 0;
  for (int t = 1; t <= 3; ++t) {
    double g = 2 * (p * 3 - 1) * 3;
    g *= std::min(1.0, 4.0 / (std::fabs(g) + 1e-6));  // clip_grad_norm_
    g += 0.1 * p;
    buf = t == 1 ? g : 0.9 * buf + g;
    p -= 0.01 * (g + 0.9 * buf);
    model.train_on_batch(x, y);
    EXPECT_NEAR(model.gather_weight("d.kernel").f32()[0], p, 1e-5) << "step " << t;
  }
}

TEST(Model, ClearErrors) {
  auto in = Input({3});
  Model model({in}, Dense(2)(in));
  Tensor x = random_tensor({4, 3}, 1), y = random_tensor({4, 2}, 2);
  EXPECT_THROW(model.fit(x, y), Error);  // not compiled
  model.compile(SGD(), losses::mean_squared_error);
  EXPECT_THROW(model.train_on_batch(random_tensor({4, 5}, 1), y), Error);  // wrong width
  EXPECT_THROW(model.set_weight(model.weight_paths()[0], random_tensor({2, 2}, 1)), Error);
  EXPECT_THROW(model.gather_weight("nope"), Error);
  // Mistakes name what was asked for, never an std::out_of_range.
  auto message = [&](auto f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string kernel = model.weight_paths()[0];
  EXPECT_NE(message([&] {
              model.gather_weight("optimizer.v." + kernel);
            }).find("has no optimizer slot 'v'"),
            std::string::npos);
  EXPECT_NE(message([&] { model.set_weight("dense_9.kernel", x); }).find("'dense_9.kernel'"),
            std::string::npos);
  EXPECT_NE(message([&] { model.gather_weight("optimizer."); }).find("optimizer.<slot>"),
            std::string::npos);
  EXPECT_THROW(Dense(0), Error);
  EXPECT_THROW(Activation("swishy")(Input({2})), Error);
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// Two named inputs, as Keras's dict of inputs: fit and predict take them by
// name, and a mesh gives the one-device losses and predictions.
TEST(Model, SeveralNamedInputsTrainOnAnyMesh) {
  const auto build = [] {
    auto a = Input({5}, DType::F32, "a"), b = Input({3}, DType::F32, "b");
    auto h = Add()(
        {Dense(8, DenseOptions().name("from_a"))(a), Dense(8, DenseOptions().name("from_b"))(b)});
    auto model = std::make_unique<Model>(
        std::vector{a, b}, Dense(4, DenseOptions().name("out"))(Activation("relu")(h)));
    model->set_seed(3);
    return model;
  };
  const Tensor xa = testing::random_tensor({12, 5}, 1), xb = testing::random_tensor({12, 3}, 2);
  Tensor y({12}, DType::I32);
  for (int i = 0; i < 12; ++i) y.i32()[i] = i % 4;
  const ModelInputs inputs{{"a", xa}, {"b", xb}};
  std::vector<double> reference;
  Tensor predicted;
  for (const char* spec : {"", "data=2", "model=2", "data=2,model=2"}) {
    std::unique_ptr<Model> model = build();
    if (*spec)
      model->set_distribution(
          std::make_shared<AutoShard>(DeviceMesh::parse(spec), "data", AutoShardOptions{}));
    model->compile(SGD({.learning_rate = 0.1}), losses::sparse_categorical_crossentropy);
    const History h = model->fit(inputs, y, {.batch_size = 4, .epochs = 3, .verbose = false});
    const Tensor p = model->predict({{"b", xb}, {"a", xa}}, 5);  // any order, uneven batches
    if (reference.empty()) {
      reference = h.loss;
      predicted = p;
      EXPECT_LT(h.loss.back(), h.loss.front());
      continue;
    }
    for (size_t e = 0; e < reference.size(); ++e)
      EXPECT_NEAR(h.loss[e], reference[e], 1e-5 * reference[e]) << spec << ", epoch " << e;
    EXPECT_LT(max_relative_error(p, predicted), 1e-5) << spec;
  }
  // Which input is which matters: swapping the tensors' names is an error
  // (their shapes differ), a missing or unknown name too.
  std::unique_ptr<Model> model = build();
  model->compile(SGD(), losses::sparse_categorical_crossentropy);
  const auto error = [&](const ModelInputs& x) {
    try {
      model->fit(x, y, {.verbose = false});
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({{"a", xb}, {"b", xa}}).find("input 'a' of shape [12, 3]"), std::string::npos);
  EXPECT_NE(error({{"a", xa}}).find("input 'b' is missing"), std::string::npos);
  EXPECT_NE(error({{"a", xa}, {"b", xb}, {"c", xb}}).find("no input named 'c'"), std::string::npos);
  EXPECT_NE(error(xa).find("give them by name"), std::string::npos);
  EXPECT_NE(error({{"a", xa}, {"b", testing::random_tensor({10, 3}, 4)}}).find("same number"),
            std::string::npos);
}

}  // namespace
}  // namespace autoshard
