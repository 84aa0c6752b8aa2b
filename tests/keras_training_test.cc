// Keras's losses, optimizers and metrics against their formulas written
// here on small arrays (in double), gradients against finite differences,
// and the optimizers on meshes against one device.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/metrics.h"
#include "autoshard/nn/model.h"
#include "autoshard/optim/keras_optimizers.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::random_tensor;

// The loss of (p, t) and its gradient with respect to p.
std::pair<double, Tensor> loss_and_gradient(const Loss& loss, const Tensor& p, const Tensor& t) {
  Graph g;
  Value pv = g.input("p", p.shape()), tv = g.input("t", t.shape(), t.dtype());
  Value l = loss(pv, tv);
  Value dp = gradients(l, {pv})[0];
  const std::vector<Tensor> out = testing::evaluate(g, {{"p", p}, {"t", t}}, {l.id, dp.id});
  return {out[0].item(), out[1]};
}

// Central differences of the loss in p.
Tensor finite_difference(const Loss& loss, const Tensor& p, const Tensor& t, float h) {
  Tensor fd(p.shape());
  for (int64_t i = 0; i < p.numel(); ++i) {
    Tensor a = p.clone(), b = p.clone();
    a.f32()[i] += h;
    b.f32()[i] -= h;
    fd.f32()[i] = static_cast<float>(
        (loss_and_gradient(loss, a, t).first - loss_and_gradient(loss, b, t).first) / (2 * h));
  }
  return fd;
}

// Probabilities: positive rows that need not sum to one (Keras normalises).
Tensor probabilities(Shape shape, uint64_t seed) {
  Tensor p = random_tensor(shape, seed);
  for (int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = 0.05f + std::abs(p.f32()[i]);
  return p;
}

TEST(KerasLosses, CategoricalCrossentropyBothWaysWithLabelSmoothing) {
  const Tensor z = random_tensor({4, 5}, 1), q = probabilities({4, 5}, 2);
  Tensor t({4, 5});
  for (int64_t r = 0; r < 4; ++r)
    for (int64_t c = 0; c < 5; ++c) t.f32()[r * 5 + c] = c == (r * 3) % 5 ? 1.0f : 0.0f;
  for (double s : {0.0, 0.1}) {
    for (bool logits : {true, false}) {
      const Tensor& p = logits ? z : q;
      double want = 0;
      for (int64_t r = 0; r < 4; ++r) {
        const float* row = p.f32() + r * 5;
        double norm = 0, mx = -1e30;
        for (int c = 0; c < 5; ++c) norm += logits ? 0 : row[c], mx = std::max(mx, double(row[c]));
        double lse = 0;
        for (int c = 0; c < 5; ++c) lse += std::exp(row[c] - mx);
        lse = mx + std::log(lse);
        for (int c = 0; c < 5; ++c) {
          const double y = t.f32()[r * 5 + c] * (1 - s) + s / 5;
          const double log_p = logits ? row[c] - lse : std::log(row[c] / norm);
          want -= y * log_p / 4;
        }
      }
      const Loss loss =
          losses::CategoricalCrossentropy({.from_logits = logits, .label_smoothing = s});
      const auto [got, grad] = loss_and_gradient(loss, p, t);
      EXPECT_NEAR(got, want, 1e-5 * want) << "logits " << logits << " smoothing " << s;
      EXPECT_LT(max_relative_error(grad, finite_difference(loss, p, t, 1e-2f)), 2e-3);
    }
  }
}

TEST(KerasLosses, SparseCategoricalCrossentropyFromProbabilities) {
  const Tensor q = probabilities({3, 4}, 3);
  Tensor ids({3}, DType::I32);
  for (int i = 0; i < 3; ++i) ids.i32()[i] = (i * 2 + 1) % 4;
  double want = 0;
  for (int64_t r = 0; r < 3; ++r) {
    double norm = 0;
    for (int c = 0; c < 4; ++c) norm += q.f32()[r * 4 + c];
    want -= std::log(q.f32()[r * 4 + ids.i32()[r]] / norm) / 3;
  }
  const Loss loss = losses::SparseCategoricalCrossentropy();
  const auto [got, grad] = loss_and_gradient(loss, q, ids);
  EXPECT_NEAR(got, want, 1e-5 * want);
  // d/dq_c of -log(q_t / sum q) / rows = (1 / sum q - [c == t] / q_t) / rows.
  Tensor exact({3, 4});
  for (int64_t r = 0; r < 3; ++r) {
    double norm = 0;
    for (int c = 0; c < 4; ++c) norm += q.f32()[r * 4 + c];
    for (int c = 0; c < 4; ++c)
      exact.f32()[r * 4 + c] = static_cast<float>(
          (1 / norm - (c == ids.i32()[r] ? 1 / double(q.f32()[r * 4 + c]) : 0.0)) / 3);
  }
  EXPECT_LT(max_relative_error(grad, exact), 1e-5);
  // The string form is Keras's: probabilities.
  EXPECT_NEAR(loss_and_gradient(losses::by_name("sparse_categorical_crossentropy"), q, ids).first,
              want, 1e-5 * want);
  EXPECT_THROW(losses::by_name("hinge"), Error);
}

TEST(KerasLosses, BinaryCrossentropyBothWaysWithLabelSmoothing) {
  const Tensor x = random_tensor({3, 4}, 4, 2.0f);
  Tensor p = x.clone(), t({3, 4});
  for (int64_t i = 0; i < 12; ++i) {
    p.f32()[i] = 1.0f / (1.0f + std::exp(-x.f32()[i]));
    t.f32()[i] = float(i % 3 == 0);
  }
  for (double s : {0.0, 0.2}) {
    double want = 0;
    for (int64_t i = 0; i < 12; ++i) {
      const double y = t.f32()[i] * (1 - s) + 0.5 * s, q = 1 / (1 + std::exp(-double(x.f32()[i])));
      want -= (y * std::log(q) + (1 - y) * std::log(1 - q)) / 12;
    }
    for (bool logits : {true, false}) {
      const Loss loss = losses::BinaryCrossentropy({.from_logits = logits, .label_smoothing = s});
      const Tensor& in = logits ? x : p;
      const auto [got, grad] = loss_and_gradient(loss, in, t);
      EXPECT_NEAR(got, want, 2e-5 * want) << "logits " << logits << " smoothing " << s;
      // From logits (s(x) - y) / n; from probabilities ((1 - y) / (1 - p) - y / p) / n.
      Tensor exact({3, 4});
      for (int64_t i = 0; i < 12; ++i) {
        const double y = t.f32()[i] * (1 - s) + 0.5 * s, q = in.f32()[i];
        exact.f32()[i] = static_cast<float>(
            (logits ? 1 / (1 + std::exp(-q)) - y : (1 - y) / (1 - q) - y / q) / 12);
      }
      EXPECT_LT(max_relative_error(grad, exact), 1e-5) << "logits " << logits;
    }
  }
}

TEST(KerasLosses, MseMaeHuber) {
  const Tensor p = random_tensor({4, 3}, 5, 2.0f), t = random_tensor({4, 3}, 6);
  double mse = 0, mae = 0, huber = 0;
  for (int64_t i = 0; i < 12; ++i) {
    const double e = double(p.f32()[i]) - t.f32()[i], a = std::abs(e);
    mse += e * e / 12;
    mae += a / 12;
    huber += (a <= 1.5 ? 0.5 * e * e : 1.5 * (a - 0.75)) / 12;
  }
  EXPECT_NEAR(loss_and_gradient(losses::MeanSquaredError(), p, t).first, mse, 1e-5 * mse);
  EXPECT_NEAR(loss_and_gradient(losses::by_name("mae"), p, t).first, mae, 1e-5 * mae);
  const Loss h = losses::Huber(1.5);
  const auto [got, grad] = loss_and_gradient(h, p, t);
  EXPECT_NEAR(got, huber, 1e-5 * huber);
  EXPECT_LT(max_relative_error(grad, finite_difference(h, p, t, 1e-3f)), 5e-3);
  EXPECT_THROW(losses::Huber(0), Error);
  EXPECT_THROW(loss_and_gradient(losses::MeanSquaredError(), p, random_tensor({4, 2}, 7)), Error);
}

TEST(KerasMetrics, BinaryAccuracyMaeMse) {
  Tensor p({2, 3}), t({2, 3});
  const float pv[] = {0.9f, 0.2f, 0.6f, 0.4f, 0.5f, 0.1f}, tv[] = {1, 0, 0, 1, 1, 0};
  std::copy(pv, pv + 6, p.f32());
  std::copy(tv, tv + 6, t.f32());
  const Metric::Sums acc = metrics::by_name("binary_accuracy").accumulate(p, t);
  EXPECT_EQ(acc[1], 2);                            // examples
  EXPECT_NEAR(acc[0] / acc[1], 3.0 / 6.0, 1e-12);  // 0.5 is not above the threshold
  EXPECT_NEAR(metrics::by_name("mae").of(p, t), (0.1 + 0.2 + 0.6 + 0.6 + 0.5 + 0.1) / 6, 1e-6);
  EXPECT_NEAR(metrics::by_name("mse").of(p, t), (0.01 + 0.04 + 0.36 + 0.36 + 0.25 + 0.01) / 6,
              1e-6);
  EXPECT_THROW(metrics::binary_accuracy().of(p, Tensor({2, 2})), Error);
}

// One Keras optimizer step on w [2, 3] with gradient g (double), state in `s`.
using Rule = std::function<void(std::vector<double>& w, const std::vector<double>& g,
                                std::map<std::string, std::vector<double>>& s, int t)>;

// Trains Dense(3, no bias) on x [4, 2] under MSE for 3 steps and checks the
// kernel against `rule` iterated in double from the same start.
void check_rule(const std::shared_ptr<Optimizer>& opt, const Rule& rule, const std::string& what,
                const char* mesh = "") {
  const Tensor x = random_tensor({4, 2}, 1), y = random_tensor({4, 3}, 2);
  auto in = Input({2});
  Model model({in}, Dense(3, DenseOptions().name("d").use_bias(false))(in));
  model.set_seed(4);
  if (*mesh)
    model.set_distribution(
        std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data", AutoShardOptions{}));
  model.compile(opt, losses::MeanSquaredError());
  const Tensor w0 = model.gather_weight("d.kernel").clone();  // not the live weights
  std::vector<double> w(w0.f32(), w0.f32() + 6);
  std::map<std::string, std::vector<double>> state;
  for (int t = 1; t <= 3; ++t) {
    std::vector<double> g(6, 0.0);  // d mean((xW - y)^2) / dW = 2/12 x^T (xW - y)
    for (int n = 0; n < 4; ++n)
      for (int j = 0; j < 3; ++j) {
        double e = -y.f32()[n * 3 + j];
        for (int i = 0; i < 2; ++i) e += x.f32()[n * 2 + i] * w[i * 3 + j];
        for (int i = 0; i < 2; ++i) g[i * 3 + j] += 2.0 / 12 * x.f32()[n * 2 + i] * e;
      }
    rule(w, g, state, t);
    model.train_on_batch(x, y);
  }
  const Tensor got = model.gather_weight("d.kernel");
  Tensor want({2, 3});
  for (int i = 0; i < 6; ++i) want.f32()[i] = static_cast<float>(w[i]);
  EXPECT_LT(max_relative_error(got, want), 2e-5) << what << " " << mesh;
  EXPECT_GT(max_abs_diff(got, w0), 1e-3) << what << ": the weights moved";
}

void each(std::vector<double>& s, size_t n, double init = 0) {
  if (s.empty()) s.assign(n, init);
}

TEST(KerasOptimizers, EachFollowsItsRule) {
  const auto adam = [](double lr, double wd) -> Rule {
    return [=](auto& w, const auto& g, auto& s, int t) {
      each(s["m"], 6), each(s["v"], 6);
      for (int i = 0; i < 6; ++i) {
        w[i] -= lr * wd * w[i];
        s["m"][i] = 0.9 * s["m"][i] + 0.1 * g[i];
        s["v"][i] = 0.999 * s["v"][i] + 0.001 * g[i] * g[i];
        const double mh = s["m"][i] / (1 - std::pow(0.9, t));
        const double vh = s["v"][i] / (1 - std::pow(0.999, t));
        w[i] -= lr * mh / (std::sqrt(vh) + 1e-7);
      }
    };
  };
  check_rule(optimizers::Adam({.learning_rate = 0.05}), adam(0.05, 0), "Adam");
  check_rule(optimizers::AdamW({.learning_rate = 0.05}), adam(0.05, 0.004), "AdamW");
  for (bool nesterov : {false, true})
    check_rule(
        optimizers::SGD({.learning_rate = 0.1, .momentum = 0.9, .nesterov = nesterov}),
        [=](auto& w, const auto& g, auto& s, int) {
          each(s["v"], 6);
          for (int i = 0; i < 6; ++i) {
            s["v"][i] = 0.9 * s["v"][i] - 0.1 * g[i];
            w[i] += nesterov ? 0.9 * s["v"][i] - 0.1 * g[i] : s["v"][i];
          }
        },
        nesterov ? "SGD nesterov" : "SGD momentum");
  for (double momentum : {0.0, 0.5})
    for (bool centered : {false, true})
      check_rule(
          optimizers::RMSprop({.learning_rate = 0.01, .momentum = momentum, .centered = centered}),
          [=](auto& w, const auto& g, auto& s, int) {
            each(s["s"], 6), each(s["a"], 6), each(s["u"], 6);
            for (int i = 0; i < 6; ++i) {
              s["s"][i] = 0.9 * s["s"][i] + 0.1 * g[i] * g[i];
              s["a"][i] = 0.9 * s["a"][i] + 0.1 * g[i];
              const double d = s["s"][i] - (centered ? s["a"][i] * s["a"][i] : 0.0) + 1e-7;
              const double step = 0.01 * g[i] / std::sqrt(d);
              s["u"][i] = momentum * s["u"][i] + step;
              w[i] -= momentum > 0 ? s["u"][i] : step;
            }
          },
          "RMSprop momentum " + std::to_string(momentum) + (centered ? " centered" : ""));
  check_rule(
      optimizers::Adagrad({.learning_rate = 0.1}),
      [](auto& w, const auto& g, auto& s, int) {
        each(s["s"], 6, 0.1);
        for (int i = 0; i < 6; ++i) {
          s["s"][i] += g[i] * g[i];
          w[i] -= 0.1 * g[i] / std::sqrt(s["s"][i] + 1e-7);
        }
      },
      "Adagrad");
}

// The composed updates (RMSprop, Adagrad write their accumulators in place)
// give one device's numbers on any mesh.
TEST(KerasOptimizers, ShardedStepsEqualOneDevice) {
  const Rule adagrad = [](auto& w, const auto& g, auto& s, int) {
    each(s["s"], 6, 0.1);
    for (int i = 0; i < 6; ++i) {
      s["s"][i] += g[i] * g[i];
      w[i] -= 0.1 * g[i] / std::sqrt(s["s"][i] + 1e-7);
    }
  };
  const Rule rmsprop = [](auto& w, const auto& g, auto& s, int) {
    each(s["s"], 6), each(s["u"], 6);
    for (int i = 0; i < 6; ++i) {
      s["s"][i] = 0.9 * s["s"][i] + 0.1 * g[i] * g[i];
      s["u"][i] = 0.5 * s["u"][i] + 0.01 * g[i] / std::sqrt(s["s"][i] + 1e-7);
      w[i] -= s["u"][i];
    }
  };
  for (const char* mesh : {"model=3", "data=2,model=2"}) {
    check_rule(optimizers::Adagrad({.learning_rate = 0.1}), adagrad, "Adagrad", mesh);
    check_rule(optimizers::RMSprop({.learning_rate = 0.01, .momentum = 0.5}), rmsprop, "RMSprop",
               mesh);
  }
}

TEST(KerasOptimizers, DefaultsAndBadOptions) {
  EXPECT_DOUBLE_EQ(optimizers::Adam()->learning_rate, 1e-3);
  EXPECT_DOUBLE_EQ(optimizers::SGD()->learning_rate, 0.01);
  EXPECT_DOUBLE_EQ(optimizers::Adagrad()->slot_initial_value("accumulator"), 0.1);
  EXPECT_THROW(optimizers::RMSprop({.rho = 1.0}), Error);
  EXPECT_THROW(optimizers::Adam({.learning_rate = 0}), Error);
  EXPECT_THROW(optimizers::get("adadelta"), Error);
  EXPECT_NE(optimizers::get("rmsprop"), nullptr);
}

}  // namespace
}  // namespace autoshard
