// Keras's confusion-matrix, F-score, R2 and percentage metrics
// (nn/metrics.h): against the values Keras's own documentation gives for its
// examples (keras/src/metrics/*.py docstrings), against brute force (every
// threshold compared directly; the PR curve integrated numerically), and
// summed over batches against the whole epoch at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/nn/metrics.h"

namespace autoshard {
namespace {

Tensor floats(const Shape& shape, std::vector<float> values) {
  Tensor t(shape);
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

// The metric over batches of `rows` rows, summed as fit sums them.
double over_batches(const Metric& m, const Tensor& p, const Tensor& t, int64_t rows) {
  const int64_t n = p.shape()[0], width = p.numel() / n, twidth = t.numel() / n;
  Metric::Sums sums;
  for (int64_t r = 0; r < n; r += rows) {
    const int64_t k = std::min(rows, n - r);
    Shape ps = p.shape(), ts = t.shape();
    ps[0] = ts[0] = k;
    Tensor pb(ps), tb(ts);
    std::copy(p.f32() + r * width, p.f32() + (r + k) * width, pb.f32());
    std::copy(t.f32() + r * twidth, t.f32() + (r + k) * twidth, tb.f32());
    const Metric::Sums s = m.accumulate(pb, tb);
    if (sums.empty()) sums.assign(s.size(), 0.0);
    for (size_t i = 0; i < s.size(); ++i) sums[i] += s[i];
  }
  return m.result(sums);
}

TEST(ConfusionMetrics, KerasDocumentedExamples) {
  const Tensor t = floats({4}, {0, 1, 1, 1}), p = floats({4}, {1, 0, 1, 1});
  using metrics::ConfusionCell;
  EXPECT_EQ(metrics::confusion_count(ConfusionCell::TruePositives).of(p, t), 2);
  EXPECT_EQ(metrics::confusion_count(ConfusionCell::FalsePositives).of(p, t), 1);
  EXPECT_EQ(metrics::confusion_count(ConfusionCell::TrueNegatives).of(p, t), 0);
  EXPECT_EQ(metrics::confusion_count(ConfusionCell::FalseNegatives).of(p, t), 1);
  EXPECT_NEAR(metrics::precision().of(p, t), 2.0 / 3, 1e-12);
  EXPECT_NEAR(metrics::recall().of(p, t), 2.0 / 3, 1e-12);
  // Precision(top_k=2) and (top_k=4) on all-equal predictions: the first k.
  const Tensor t2 = floats({4}, {0, 0, 1, 1}), ones = floats({4}, {1, 1, 1, 1});
  EXPECT_EQ(metrics::precision({.threshold = std::nullopt, .top_k = 2}).of(ones, t2), 0.0);
  EXPECT_EQ(metrics::precision({.threshold = std::nullopt, .top_k = 4}).of(ones, t2), 0.5);
  // AUC(num_thresholds=3): 0.75.
  EXPECT_NEAR(metrics::auc({.num_thresholds = 3}).of(floats({4}, {0, 0.5f, 0.3f, 0.9f}), t2), 0.75,
              1e-12);
  // R2Score: 0.57142854.
  EXPECT_NEAR(metrics::r2_score().of(floats({3, 1}, {2, 4, 4}), floats({3, 1}, {1, 4, 3})), 4.0 / 7,
              1e-12);
  // MeanAbsolutePercentageError: 250000000.
  EXPECT_NEAR(metrics::mean_absolute_percentage_error().of(floats({2, 2}, {1, 1, 0, 0}),
                                                           floats({2, 2}, {0, 1, 0, 0})),
              2.5e8, 1);
  // CategoricalAccuracy and TopKCategoricalAccuracy(k=1): 0.5.
  const Tensor one_hot = floats({2, 3}, {0, 0, 1, 0, 1, 0});
  const Tensor scores = floats({2, 3}, {0.1f, 0.9f, 0.8f, 0.05f, 0.95f, 0});
  EXPECT_EQ(metrics::categorical_accuracy().of(scores, one_hot), 0.5);
  EXPECT_EQ(metrics::top_k_categorical_accuracy(1).of(scores, one_hot), 0.5);
  EXPECT_EQ(metrics::top_k_categorical_accuracy(2).of(scores, one_hot), 1.0);
}

TEST(ConfusionMetrics, F1ScoreAveragesAsKerasDocuments) {
  // Per class [0.5, 0.8, 0.6666667] in Keras's F1Score(threshold=0.5) example.
  const Tensor t = floats({3, 3}, {1, 1, 1, 1, 0, 0, 1, 1, 0});
  const Tensor p = floats({3, 3}, {0.2f, 0.6f, 0.7f, 0.2f, 0.6f, 0.6f, 0.6f, 0.8f, 0});
  const double per_class[] = {0.5, 0.8, 2.0 / 3};
  EXPECT_NEAR(metrics::fbeta_score("macro", 1, 0.5).of(p, t),
              (per_class[0] + per_class[1] + per_class[2]) / 3, 1e-6);
  EXPECT_NEAR(metrics::fbeta_score("weighted", 1, 0.5).of(p, t),
              (3 * per_class[0] + 2 * per_class[1] + per_class[2]) / 6, 1e-6);
  EXPECT_NEAR(metrics::fbeta_score("micro", 1, 0.5).of(p, t), 2.0 / 3, 1e-6);  // tp 4, fp 2, fn 2
  EXPECT_THROW(metrics::fbeta_score("none"), Error);
}

// Random scores in [0, 1] and labels, from a seed.
std::pair<Tensor, Tensor> random_binary(int64_t n, int64_t width, uint64_t seed) {
  Tensor p({n, width}), t({n, width});
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (int64_t i = 0; i < n * width; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p.f32()[i] = float((s >> 40) % 1000) / 999.0f;
    t.f32()[i] = float((s >> 20) % 3 == 0) + (p.f32()[i] > 0.6f && (s >> 10) % 2);
    t.f32()[i] = t.f32()[i] > 0;
  }
  return {p, t};
}

// ROC area with every threshold compared directly (no buckets).
double roc_by_brute_force(const Tensor& p, const Tensor& t, int n) {
  std::vector<double> fpr, tpr;
  for (int k = 0; k < n; ++k) {
    const double thr = k == 0 ? -1e-7 : k == n - 1 ? 1 + 1e-7 : double(k) / (n - 1);
    double tp = 0, fp = 0, pos = 0, neg = 0;
    for (int64_t i = 0; i < p.numel(); ++i) {
      const bool label = t.f32()[i] != 0, above = p.f32()[i] > thr;
      pos += label, neg += !label, tp += label && above, fp += !label && above;
    }
    tpr.push_back(pos ? tp / pos : 0), fpr.push_back(neg ? fp / neg : 0);
  }
  double area = 0;
  for (int k = 0; k + 1 < n; ++k) area += (fpr[k] - fpr[k + 1]) * (tpr[k] + tpr[k + 1]) / 2;
  return area;
}

TEST(ConfusionMetrics, AucMatchesDirectThresholdsAndSumsOverBatches) {
  const auto [p, t] = random_binary(53, 3, 11);
  const Metric roc = metrics::auc();
  EXPECT_NEAR(roc.of(p, t), roc_by_brute_force(p, t, 200), 1e-9);
  EXPECT_NEAR(over_batches(roc, p, t, 8), roc.of(p, t), 1e-12);
  // multi_label: each column's own curve, their mean.
  double columns = 0;
  for (int c = 0; c < 3; ++c) {
    Tensor pc({53}), tc({53});
    for (int64_t r = 0; r < 53; ++r)
      pc.f32()[r] = p.f32()[r * 3 + c], tc.f32()[r] = t.f32()[r * 3 + c];
    columns += roc_by_brute_force(pc, tc, 200) / 3;
  }
  EXPECT_NEAR(metrics::auc({.multi_label = true}).of(p, t), columns, 1e-9);
  for (const char* method : {"minoring", "majoring"}) {
    const double a = metrics::auc({.summation_method = method}).of(p, t);
    EXPECT_TRUE(std::string(method) == "minoring" ? a <= roc.of(p, t) : a >= roc.of(p, t));
  }
}

// The PR curve's area by integrating precision over recall numerically,
// with true and predicted positives linear between thresholds.
double pr_by_integration(const Tensor& p, const Tensor& t, int n) {
  std::vector<double> tp(n), pp(n);
  double pos = 0;
  for (int64_t i = 0; i < p.numel(); ++i) pos += t.f32()[i] != 0;
  for (int k = 0; k < n; ++k) {
    const double thr = k == 0 ? -1e-7 : k == n - 1 ? 1 + 1e-7 : double(k) / (n - 1);
    for (int64_t i = 0; i < p.numel(); ++i)
      if (p.f32()[i] > thr) tp[k] += t.f32()[i] != 0, pp[k] += 1;
  }
  double area = 0;
  const int steps = 2000;
  for (int k = 0; k + 1 < n; ++k) {
    if (tp[k] == tp[k + 1]) continue;  // no recall gained
    for (int s = 0; s < steps; ++s) {
      // Midpoints between the two thresholds' points.
      const double f = (s + 0.5) / steps;
      const double tp_at = tp[k + 1] + f * (tp[k] - tp[k + 1]);
      const double pp_at = pp[k + 1] + f * (pp[k] - pp[k + 1]);
      area += (pp_at > 0 ? tp_at / pp_at : 1.0) * (tp[k] - tp[k + 1]) / steps / pos;
    }
  }
  return area;
}

TEST(ConfusionMetrics, PrAucInterpolatesAsDavisAndGoadrich) {
  const auto [p, t] = random_binary(61, 2, 5);
  const Metric pr = metrics::auc({.num_thresholds = 50, .curve = "PR"});
  EXPECT_NEAR(pr.of(p, t), pr_by_integration(p, t, 50), 1e-4);
  EXPECT_NEAR(over_batches(pr, p, t, 7), pr.of(p, t), 1e-12);
}

TEST(ConfusionMetrics, RatiosOverBatchesAreTheEpochsNotTheMeanOfBatches) {
  const auto [p, t] = random_binary(40, 2, 3);
  for (const Metric& m : {metrics::precision(), metrics::recall(), metrics::r2_score(),
                          metrics::fbeta_score("macro", 2.0),
                          metrics::precision({.threshold = std::nullopt, .class_id = 1}),
                          metrics::recall({.threshold = 0.3, .top_k = 1})})
    EXPECT_NEAR(over_batches(m, p, t, 6), m.of(p, t), 1e-12) << m.name;
}

TEST(ConfusionMetrics, BadArgumentsAndShapesAreRefused) {
  EXPECT_THROW(metrics::precision({.threshold = 1.5}), Error);
  EXPECT_THROW(metrics::auc({.num_thresholds = 1}), Error);
  EXPECT_THROW(metrics::auc({.curve = "PRGAIN"}), Error);
  EXPECT_THROW(metrics::r2_score("raw_values"), Error);
  EXPECT_THROW(metrics::precision().of(floats({2, 2}, {0, 1, 1, 0}), floats({3}, {0, 1, 1})),
               Error);
  EXPECT_THROW(metrics::precision({.threshold = std::nullopt, .class_id = 5})
                   .of(floats({1, 2}, {0, 1}), floats({1, 2}, {0, 1})),
               Error);
}

}  // namespace
}  // namespace autoshard
