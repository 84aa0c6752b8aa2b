// Metrics against brute force on small random cases, and as fit and
// evaluate report them: the same numbers as computing them from predict(),
// on one device and on meshes.
#include "autoshard/nn/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "autoshard/error.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/sample_weights.h"
#include "autoshard/plan/distribution.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::random_tensor;

// Class ids [n] in [0, classes), from a seed.
Tensor random_classes(int64_t n, int64_t classes, uint64_t seed) {
  Tensor t({n}, DType::I32);
  uint64_t s = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    t.i32()[i] = static_cast<int32_t>((s >> 33) % uint64_t(classes));
  }
  return t;
}

// The target's rank by sorting: how many classes score strictly higher.
int64_t rank_by_sorting(const float* row, int64_t classes, int32_t target) {
  std::vector<float> sorted(row, row + classes);
  std::sort(sorted.begin(), sorted.end(), std::greater<>());
  return std::find(sorted.begin(), sorted.end(), row[target]) - sorted.begin();
}

TEST(Metrics, MatchBruteForce) {
  const int64_t n = 40, classes = 7;
  const Tensor p = random_tensor({n, classes}, 3), y = random_classes(n, classes, 4);
  std::vector<int64_t> ranks;
  for (int64_t i = 0; i < n; ++i)
    ranks.push_back(rank_by_sorting(p.f32() + i * classes, classes, y.i32()[i]));
  for (int k = 1; k <= classes; ++k) {
    const double expected =
        double(std::count_if(ranks.begin(), ranks.end(), [&](int64_t r) { return r < k; })) / n;
    EXPECT_DOUBLE_EQ(metrics::sparse_top_k_categorical_accuracy(k).of(p, y), expected)
        << "k = " << k;
  }
  const double top1 = double(std::count(ranks.begin(), ranks.end(), int64_t{0})) / double(n);
  EXPECT_DOUBLE_EQ(metrics::sparse_categorical_accuracy().of(p, y), top1);
  EXPECT_DOUBLE_EQ(metrics::accuracy().of(p, y), top1);
  EXPECT_GT(top1, 0.0);
  EXPECT_LT(top1, 1.0);
  EXPECT_DOUBLE_EQ(metrics::sparse_top_k_categorical_accuracy(classes).of(p, y), 1.0);
  EXPECT_EQ(metrics::by_name("top_3").name, "top_3");
  EXPECT_EQ(metrics::by_name("sparse_top_k_categorical_accuracy").name,
            "sparse_top_k_categorical_accuracy");
}

TEST(Metrics, TiesOneHotAndBinaryTargets) {
  // Two equal maxima: argmax takes the first; top-1 counts the target if no
  // class scores strictly higher.
  Tensor p({2, 3});
  const float values[6] = {0.5f, 0.5f, 0.1f, 0.2f, 0.9f, 0.9f};
  std::copy(values, values + 6, p.f32());
  Tensor y({2}, DType::I32);
  y.i32()[0] = 1, y.i32()[1] = 2;
  EXPECT_DOUBLE_EQ(metrics::sparse_categorical_accuracy().of(p, y), 0.0);
  EXPECT_DOUBLE_EQ(metrics::sparse_top_k_categorical_accuracy(1).of(p, y), 1.0);
  // One-hot f32 targets: argmax against argmax.
  Tensor one_hot({2, 3});
  one_hot.f32()[0] = 1, one_hot.f32()[3 + 1] = 1;
  EXPECT_DOUBLE_EQ(metrics::accuracy().of(p, one_hot), 1.0);
  // One output per example: the same side of 0.5.
  Tensor b({3, 1}), t({3, 1});
  b.f32()[0] = 0.7f, b.f32()[1] = 0.2f, b.f32()[2] = 0.6f;
  t.f32()[0] = 1, t.f32()[1] = 0, t.f32()[2] = 0;
  EXPECT_NEAR(metrics::accuracy().of(b, t), 2.0 / 3, 1e-12);
  EXPECT_THROW(metrics::sparse_categorical_accuracy().of(p, random_classes(3, 3, 1)), Error);
  Tensor bad = y.clone();
  bad.i32()[0] = 3;
  EXPECT_THROW(metrics::sparse_categorical_accuracy().of(p, bad), Error);
  EXPECT_THROW(metrics::by_name("f1"), Error);
}

// A masked output's mean metric (Keras's MeanMetricWrapper, the mask as
// sample weights): masked steps add nothing and each example adds its mean
// over the steps; weighed by 1 / steps, so the epoch's metric is the mean
// over the kept steps. A metric that is not a mean ignores masks.
TEST(Metrics, MaskedStepsAreLeftOut) {
  // [2 examples, 3 steps, 2 classes]; the argmax is right at steps (0, 0),
  // (0, 2) and (1, 1), wrong elsewhere.
  const Tensor p = Tensor::from({2, 3, 2}, {0.9f, 0.1f, 0.2f, 0.8f, 0.6f, 0.4f,  //
                                            0.3f, 0.7f, 0.7f, 0.3f, 0.1f, 0.9f});
  const Tensor y = Tensor::from_ints({2, 3}, {0, 0, 0, 0, 0, 0});
  const Tensor mask = Tensor::from({2, 3}, {1, 0, 1, 0, 1, 0});  // keeps the right ones
  const Metric accuracy = metrics::sparse_categorical_accuracy();
  const Metric::Sums sums = metrics::masked_sums(accuracy, p, y, mask);
  ASSERT_EQ(sums.size(), 2u);
  EXPECT_NEAR(sums[0], 3.0 / 3, 1e-12);  // 3 right steps, each 1/3 of its example
  EXPECT_NEAR(sums[1], 3.0 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(accuracy.result(sums), 1.0);
  EXPECT_NEAR(accuracy.of(p, y), 0.5, 1e-12);  // unmasked: 3 of 6
  const Tensor none = Tensor::zeros({2, 3});
  EXPECT_EQ(metrics::masked_sums(accuracy, p, y, none), Metric::Sums({0.0, 0.0}));
  EXPECT_THROW(metrics::masked_sums(metrics::precision(), p, y, mask), Error);
  EXPECT_THROW(metrics::masked_sums(accuracy, p, y, Tensor::zeros({3, 2})), Error);
}

// A two-layer classifier of 4 classes.
std::unique_ptr<Model> classifier() {
  auto in = Input({6});
  auto h = Dense(16, DenseOptions().activation("relu").name("hidden"))(in);
  auto model = std::make_unique<Model>(std::vector{in}, Dense(4, DenseOptions().name("out"))(h));
  model->set_seed(7);
  return model;
}

// The accuracy of predict()'s logits, from the metric's own definition.
double accuracy_of(Model& model, const Tensor& x, const Tensor& y, int k) {
  return metrics::sparse_top_k_categorical_accuracy(k).of(model.predict(x, 8), y);
}

TEST(Metrics, FitAndEvaluateReportThemOnAnyMesh) {
  const Tensor x = random_tensor({24, 6}, 11), y = random_classes(24, 4, 12);
  std::vector<Logs> evaluated;
  for (const char* spec : {"", "data=2", "model=2", "data=2,model=2"}) {
    std::unique_ptr<Model> model = classifier();
    if (*spec)
      model->set_distribution(
          std::make_shared<AutoShard>(DeviceMesh::parse(spec), "data", AutoShardOptions{}));
    model->compile(SGD({.learning_rate = 0.05}), losses::sparse_categorical_crossentropy,
                   {metrics::accuracy(), metrics::sparse_top_k_categorical_accuracy(2)});
    // One batch per epoch: the epoch's training accuracy is that of the
    // weights before its update.
    const double before = accuracy_of(*model, x, y, 1), before2 = accuracy_of(*model, x, y, 2);
    const History h = model->fit(x, y, {.batch_size = 24, .epochs = 2, .verbose = false});
    ASSERT_EQ(h.metrics.at("accuracy").size(), 2u);
    EXPECT_DOUBLE_EQ(h.metrics.at("accuracy")[0], before) << spec;
    EXPECT_DOUBLE_EQ(h.metrics.at("top_2")[0], before2) << spec;
    const Logs logs = model->evaluate_with_metrics(x, y, 5);  // uneven batches: 5 5 5 5 4
    EXPECT_DOUBLE_EQ(logs.at("accuracy"), accuracy_of(*model, x, y, 1)) << spec;
    EXPECT_DOUBLE_EQ(logs.at("top_2"), accuracy_of(*model, x, y, 2)) << spec;
    EXPECT_NEAR(logs.at("loss"), model->evaluate(x, y, 5), 1e-12) << spec;
    evaluated.push_back(logs);
  }
  for (const Logs& l : evaluated) {
    EXPECT_DOUBLE_EQ(l.at("accuracy"), evaluated[0].at("accuracy"));
    EXPECT_NEAR(l.at("loss"), evaluated[0].at("loss"), 1e-5);
  }
}

}  // namespace
}  // namespace autoshard
