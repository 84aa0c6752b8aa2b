// Keras's composed layers (BatchNormalization, GroupNormalization, merge and
// reshaping layers) and functional models of several outputs: forward
// values against loops written here, gradients against finite differences,
// training on meshes against one device.
#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/merge_layers.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/normalization_layers.h"
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/optim/keras_optimizers.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::random_tensor;

// Runs `layer` on x in a graph of its own with the given weights bound by
// name (moving statistics written into them when training).
Tensor run_layer(const Layer& layer, const std::vector<Tensor>& xs, bool training,
                 std::map<std::string, Tensor> weights = {}) {
  Graph g;
  Trace trace(g, training, 0);
  std::vector<Value> ins;
  for (size_t i = 0; i < xs.size(); ++i)
    ins.push_back(g.input("x" + std::to_string(i), xs[i].shape()));
  Value y = layer(trace, ins);
  std::map<std::string, Tensor> leaves = weights;
  for (size_t i = 0; i < xs.size(); ++i) leaves["x" + std::to_string(i)] = xs[i];
  return testing::evaluate(g, leaves, {y.id})[0];
}

// Per-channel mean and biased variance of x [n, ..., c] over all but the last axis.
void channel_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t c = x.shape().back(), rows = x.numel() / c;
  mean.assign(c, 0);
  var.assign(c, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < c; ++k) mean[k] += x.f32()[r * c + k] / double(rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < c; ++k) {
      const double d = x.f32()[r * c + k] - mean[k];
      var[k] += d * d / double(rows);
    }
}

TEST(BatchNormalization, TrainingUsesTheBatchAndUpdatesTheMovingStatistics) {
  const Tensor x = random_tensor({3, 5, 7, 5}, 1, 2.0f);  // odd sizes throughout
  const Tensor gamma = random_tensor({5}, 2), beta = random_tensor({5}, 3);
  Tensor moving_mean = random_tensor({5}, 4), moving_var = random_tensor({5}, 5);
  for (int64_t k = 0; k < 5; ++k) moving_var.f32()[k] = 0.5f + std::abs(moving_var.f32()[k]);
  const Tensor mm0 = moving_mean.clone(), mv0 = moving_var.clone();
  BatchNormalization bn(BatchNormalizationOptions().name("bn").momentum(0.9));
  const std::map<std::string, Tensor> w{{"bn.gamma", gamma},
                                        {"bn.beta", beta},
                                        {"bn.moving_mean", moving_mean},
                                        {"bn.moving_variance", moving_var}};
  const Tensor y = run_layer(bn, {x}, /*training=*/true, w);
  std::vector<double> mean, var;
  channel_stats(x, mean, var);
  double worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = i % 5;
    const double want =
        gamma.f32()[k] * (x.f32()[i] - mean[k]) / std::sqrt(var[k] + 1e-3) + beta.f32()[k];
    worst = std::max(worst, std::abs(y.f32()[i] - want));
  }
  EXPECT_LT(worst, 1e-5 * 4);
  for (int64_t k = 0; k < 5; ++k) {  // written in place by the step
    EXPECT_NEAR(moving_mean.f32()[k], 0.9 * mm0.f32()[k] + 0.1 * mean[k], 1e-6);
    EXPECT_NEAR(moving_var.f32()[k], 0.9 * mv0.f32()[k] + 0.1 * var[k], 1e-5);
  }
  // Inference reads the moving statistics and writes nothing.
  const Tensor mm1 = moving_mean.clone();
  const Tensor z = run_layer(bn, {x}, /*training=*/false, w);
  worst = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t k = i % 5;
    const double want = gamma.f32()[k] * (x.f32()[i] - moving_mean.f32()[k]) /
                            std::sqrt(moving_var.f32()[k] + 1e-3) +
                        beta.f32()[k];
    worst = std::max(worst, std::abs(z.f32()[i] - want));
  }
  EXPECT_LT(worst, 1e-5 * 4);
  EXPECT_EQ(max_abs_diff(moving_mean, mm1), 0.0);
}

TEST(BatchNormalization, AnyAxisAndNoScaleOrCenter) {
  const Tensor x = random_tensor({4, 3, 6}, 7);  // channels on axis 1
  BatchNormalization bn(
      BatchNormalizationOptions().name("bn1").axis(1).center(false).scale(false).epsilon(0.01));
  const Tensor y = run_layer(
      bn, {x}, true,
      {{"bn1.moving_mean", Tensor::zeros({3})}, {"bn1.moving_variance", Tensor::zeros({3})}});
  for (int64_t k = 0; k < 3; ++k) {
    double mean = 0, var = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t t = 0; t < 6; ++t) mean += x.f32()[(n * 3 + k) * 6 + t] / 24.0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t t = 0; t < 6; ++t) var += std::pow(x.f32()[(n * 3 + k) * 6 + t] - mean, 2) / 24;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t t = 0; t < 6; ++t) {
        const int64_t i = (n * 3 + k) * 6 + t;
        EXPECT_NEAR(y.f32()[i], (x.f32()[i] - mean) / std::sqrt(var + 0.01), 1e-5);
      }
  }
}

// d(sum(w * layer(x))) / d(x, gamma, beta) against central differences.
TEST(BatchNormalization, GradientsMatchFiniteDifferences) {
  const Tensor x = random_tensor({5, 3}, 11), w = random_tensor({5, 3}, 12);
  const Tensor gamma = random_tensor({3}, 13), beta = random_tensor({3}, 14);
  BatchNormalization bn(BatchNormalizationOptions().name("bn"));
  auto loss_graph = [&](Graph& g) {
    Trace trace(g, true, 0);
    Value xv = g.input("x", x.shape());
    Value y = bn(trace, xv);
    return ops::reduce_sum(y * g.input("w", w.shape()), {0, 1});
  };
  auto leaves = [&](const Tensor& xx, const Tensor& gg, const Tensor& bb) {
    return std::map<std::string, Tensor>{{"x", xx},
                                         {"w", w},
                                         {"bn.gamma", gg},
                                         {"bn.beta", bb},
                                         {"bn.moving_mean", Tensor::zeros({3})},
                                         {"bn.moving_variance", Tensor::zeros({3})}};
  };
  Graph g;
  Value loss = loss_graph(g);
  const std::vector<Value> wrt{g.value(g.find_input("x")), g.value(g.find_parameter("bn.gamma")),
                               g.value(g.find_parameter("bn.beta"))};
  std::vector<int> outs;
  for (Value v : gradients(loss, wrt)) outs.push_back(v.id);
  const std::vector<Tensor> grads = testing::evaluate(g, leaves(x, gamma, beta), outs);
  auto loss_at = [&](const Tensor& xx, const Tensor& gg, const Tensor& bb) {
    Graph h;
    Value l = loss_graph(h);
    return double(testing::evaluate(h, leaves(xx, gg, bb), {l.id})[0].item());
  };
  const std::vector<Tensor> points{x, gamma, beta};
  for (size_t which = 0; which < 3; ++which) {
    Tensor fd(points[which].shape());
    for (int64_t i = 0; i < fd.numel(); ++i) {
      std::vector<Tensor> plus{x.clone(), gamma.clone(), beta.clone()};
      std::vector<Tensor> minus{x.clone(), gamma.clone(), beta.clone()};
      plus[which].f32()[i] += 1e-2f;
      minus[which].f32()[i] -= 1e-2f;
      fd.f32()[i] = static_cast<float>(
          (loss_at(plus[0], plus[1], plus[2]) - loss_at(minus[0], minus[1], minus[2])) / 2e-2);
    }
    EXPECT_LT(max_relative_error(grads[which], fd), 2e-3) << "input " << which;
  }
}

// A small CNN-like model with BatchNormalization, trained with Keras's Adam.
std::unique_ptr<Model> bn_model() {
  auto in = Input({5, 3});
  // No bias before the normalisation: its exact gradient is zero, and Adam
  // would turn its rounding noise into full-size steps.
  auto h = Dense(6, DenseOptions().name("d1").use_bias(false))(in);
  h = BatchNormalization(BatchNormalizationOptions().name("bn").momentum(0.8))(h);
  h = Activation("relu")(h);
  auto out = Dense(4, DenseOptions().name("d2"))(Flatten("flat")(h));
  auto model = std::make_unique<Model>(std::vector{in}, out);
  model->set_seed(5);
  return model;
}

// Keras's promise made exact: the statistics are the whole batch's, so a
// batch of 6 split over 4 devices (2, 2, 1, 1 examples) trains the same
// weights and moving statistics as one device.
TEST(BatchNormalization, BatchSplitOverFourDevicesEqualsOneDevice) {
  const Tensor x = random_tensor({18, 5, 3}, 21);
  Tensor y({18}, DType::I32);
  for (int i = 0; i < 18; ++i) y.i32()[i] = (i * 7) % 4;
  std::map<std::string, Tensor> reference;
  for (const char* spec : {"", "data=4", "model=3", "data=2,model=2", "layouts"}) {
    std::unique_ptr<Model> model = bn_model();
    if (std::string(spec) == "data=4") {
      model->set_distribution(std::make_shared<DataParallel>(DeviceMesh::parse(spec)));
    } else if (std::string(spec) == "layouts") {
      // The moving statistics split over channels (4 devices, 6 channels),
      // the statistics computed under another layout: written back in place.
      LayoutMap layouts;
      layouts["bn\\.moving_.*"] = {"model"};
      layouts["d1\\.kernel"] = {"model", std::nullopt};
      model->set_distribution(
          std::make_shared<ModelParallel>(DeviceMesh::parse("data=1,model=4"), layouts));
    } else if (*spec) {
      model->set_distribution(
          std::make_shared<AutoShard>(DeviceMesh::parse(spec), "data", AutoShardOptions{}));
    }
    model->compile(optimizers::Adam({.learning_rate = 0.01}),
                   losses::SparseCategoricalCrossentropy({.from_logits = true}));
    model->fit(x, y, {.batch_size = 6, .epochs = 2, .verbose = false});
    EXPECT_EQ(model->non_trainable_weight_paths(),
              (std::vector<std::string>{"bn.moving_mean", "bn.moving_variance"}));
    for (const std::string& p : model->weight_paths()) {
      const Tensor w = model->gather_weight(p);
      if (!*spec) {
        reference[p] = w;
        continue;
      }
      EXPECT_LT(max_relative_error(w, reference[p]), 1e-5) << spec << " " << p;
    }
    if (!*spec) {
      // The moving statistics moved, and took no optimizer slot.
      EXPECT_GT(max_abs_diff(reference["bn.moving_mean"], Tensor::zeros({6})), 1e-3);
      for (const std::string& s : model->slot_paths())
        EXPECT_EQ(s.find("moving"), std::string::npos) << s;
    }
  }
}

TEST(GroupNormalization, MatchesLoopsAndRejectsUnevenGroups) {
  const Tensor x = random_tensor({2, 3, 6}, 31);
  const Tensor gamma = random_tensor({6}, 32), beta = random_tensor({6}, 33);
  GroupNormalization gn(GroupNormalizationOptions().name("gn").groups(3));
  const Tensor y = run_layer(gn, {x}, true, {{"gn.gamma", gamma}, {"gn.beta", beta}});
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t grp = 0; grp < 3; ++grp) {
      double mean = 0, var = 0;
      auto at = [&](int64_t t, int64_t c) { return (n * 3 + t) * 6 + grp * 2 + c; };
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t c = 0; c < 2; ++c) mean += x.f32()[at(t, c)] / 6.0;
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t c = 0; c < 2; ++c) var += std::pow(x.f32()[at(t, c)] - mean, 2) / 6.0;
      for (int64_t t = 0; t < 3; ++t)
        for (int64_t c = 0; c < 2; ++c) {
          const int64_t ch = grp * 2 + c;
          const double want =
              (x.f32()[at(t, c)] - mean) / std::sqrt(var + 1e-3) * gamma.f32()[ch] + beta.f32()[ch];
          EXPECT_NEAR(y.f32()[at(t, c)], want, 1e-5);
        }
    }
  EXPECT_THROW(run_layer(GroupNormalization(GroupNormalizationOptions().groups(4)), {x}, true),
               Error);
}

TEST(MergeLayers, ElementwiseAndConcatenate) {
  const Tensor a = random_tensor({2, 3}, 41), b = random_tensor({2, 3}, 42),
               c = random_tensor({2, 5}, 43);
  auto each = [&](const Tensor& y, auto f) {
    for (int64_t i = 0; i < 6; ++i) EXPECT_NEAR(y.f32()[i], f(a.f32()[i], b.f32()[i]), 1e-6) << i;
  };
  each(run_layer(Subtract(), {a, b}, false), [](float p, float q) { return p - q; });
  each(run_layer(Multiply(), {a, b}, false), [](float p, float q) { return p * q; });
  each(run_layer(Average(), {a, b}, false), [](float p, float q) { return (p + q) / 2; });
  each(run_layer(Maximum(), {a, b}, false), [](float p, float q) { return std::max(p, q); });
  each(run_layer(Minimum(), {a, b}, false), [](float p, float q) { return std::min(p, q); });
  EXPECT_THROW(run_layer(Subtract(), {a, b, a}, false), Error);
  const Tensor cat = run_layer(Concatenate(), {a, c, b}, false);
  ASSERT_EQ(cat.shape(), (Shape{2, 11}));
  for (int64_t r = 0; r < 2; ++r)
    for (int64_t k = 0; k < 11; ++k) {
      const float want =
          k < 3 ? a.f32()[r * 3 + k] : (k < 8 ? c.f32()[r * 5 + k - 3] : b.f32()[r * 3 + k - 8]);
      EXPECT_EQ(cat.f32()[r * 11 + k], want);
    }
  const Tensor rows =
      run_layer(Concatenate(1), {random_tensor({2, 1, 3}, 1), random_tensor({2, 2, 3}, 2)}, false);
  EXPECT_EQ(rows.shape(), (Shape{2, 3, 3}));
  EXPECT_THROW(run_layer(Concatenate(), {a, random_tensor({3, 5}, 4)}, false), Error);
}

TEST(ReshapingLayers, FlattenReshapePermuteRepeatRescale) {
  const Tensor x = random_tensor({2, 3, 4}, 51);
  EXPECT_EQ(run_layer(Flatten(), {x}, false).shape(), (Shape{2, 12}));
  EXPECT_EQ(run_layer(Reshape({-1, 2}), {x}, false).shape(), (Shape{2, 6, 2}));
  EXPECT_THROW(run_layer(Reshape({5, -1}), {x}, false), Error);
  const Tensor p = run_layer(Permute({2, 1}), {x}, false);
  ASSERT_EQ(p.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(p.f32()[(1 * 4 + 2) * 3 + 1], x.f32()[(1 * 3 + 1) * 4 + 2]);
  EXPECT_THROW(Permute({1, 1}), Error);
  const Tensor v = random_tensor({2, 5}, 52);
  const Tensor rep = run_layer(RepeatVector(3), {v}, false);
  ASSERT_EQ(rep.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(rep.f32()[(1 * 3 + 2) * 5 + 4], v.f32()[1 * 5 + 4]);
  const Tensor s = run_layer(Rescaling(1.0 / 255, -1.0), {x}, false);
  EXPECT_NEAR(s.f32()[7], x.f32()[7] / 255.0 - 1.0, 1e-6);
}

// A Siamese shape: one Dense applied to two inputs (shared weights), a
// residual connection, two outputs with their own losses and weights.
std::unique_ptr<Model> two_headed() {
  auto a = Input({6}, DType::F32, "left"), b = Input({6}, DType::F32, "right");
  Dense shared(5, DenseOptions().name("shared").activation("tanh"));
  auto ha = shared(a), hb = shared(b);
  auto merged = Concatenate(-1, "merged")({ha, hb, Subtract()({ha, hb})});
  auto h = Dense(15, DenseOptions().name("body"))(merged);
  h = Add()({h, merged});  // residual
  auto cls = Dense(3, DenseOptions().name("cls"))(h);
  auto reg = Dense(2, DenseOptions().name("reg"))(h);
  auto model = std::make_unique<Model>(std::vector{a, b}, std::vector{cls, reg});
  model->set_seed(8);
  return model;
}

TEST(FunctionalModel, SharedLayersSeveralOutputsAndLossWeights) {
  const Tensor xa = random_tensor({10, 6}, 61), xb = random_tensor({10, 6}, 62);
  const Tensor yr = random_tensor({10, 2}, 63);
  Tensor yc({10}, DType::I32);
  for (int i = 0; i < 10; ++i) yc.i32()[i] = i % 3;
  const ModelInputs x{{"left", xa}, {"right", xb}};
  const ModelTargets y{{"cls", yc}, {"reg", yr}};
  {
    std::unique_ptr<Model> m = two_headed();
    EXPECT_EQ(m->output_names(), (std::vector<std::string>{"cls", "reg"}));
    int kernels = 0;
    for (const std::string& p : m->weight_paths()) kernels += p == "shared.kernel";
    EXPECT_EQ(kernels, 1);
    // The weighted total is the weighted sum of each head's own loss.
    const Loss ce = losses::SparseCategoricalCrossentropy({.from_logits = true});
    m->compile(optimizers::SGD(), {ce, losses::MeanSquaredError()}, {0.3, 2.0});
    const double total = m->evaluate(x, y, 10);
    const std::vector<Tensor> outs = m->predict_outputs(x);
    ASSERT_EQ(outs.size(), 2u);
    double ce_loss = 0, mse = 0;
    for (int64_t i = 0; i < 10; ++i) {
      const float* r = outs[0].f32() + i * 3;
      const double mx = std::max({r[0], r[1], r[2]});
      const double lse =
          mx + std::log(std::exp(r[0] - mx) + std::exp(r[1] - mx) + std::exp(r[2] - mx));
      ce_loss += (lse - r[yc.i32()[i]]) / 10;
    }
    for (int64_t i = 0; i < 20; ++i) mse += std::pow(outs[1].f32()[i] - yr.f32()[i], 2) / 20;
    EXPECT_NEAR(total, 0.3 * ce_loss + 2.0 * mse, 1e-5 * total);
    EXPECT_THROW(m->fit(x, yc, {.verbose = false}), Error);  // two outputs, one target
    EXPECT_THROW(m->fit(x, {{"cls", yc}}, {.verbose = false}), Error);
  }
  std::vector<double> reference;
  for (const char* spec : {"", "model=3", "data=2,model=2"}) {
    std::unique_ptr<Model> m = two_headed();
    if (*spec)
      m->set_distribution(
          std::make_shared<AutoShard>(DeviceMesh::parse(spec), "data", AutoShardOptions{}));
    m->compile(optimizers::Adam({.learning_rate = 0.02}),
               {losses::SparseCategoricalCrossentropy({.from_logits = true}), losses::Huber()},
               {1.0, 0.5}, {metrics::accuracy()});
    const History h = m->fit(x, y, {.batch_size = 5, .epochs = 4, .verbose = false});
    EXPECT_EQ(h.metrics.count("cls_accuracy"), 1u);
    EXPECT_EQ(h.metrics.count("reg_accuracy"), 1u);
    if (reference.empty()) {
      reference = h.loss;
      EXPECT_LT(h.loss.back(), h.loss.front());
      continue;
    }
    for (size_t e = 0; e < reference.size(); ++e)
      EXPECT_NEAR(h.loss[e], reference[e], 1e-4 * reference[e]) << spec << " epoch " << e;
  }
}

// Keras's causal mask is top-left aligned whatever the lengths
// (multi_head_attention.py, _compute_causal_mask): query i attends to value
// positions j <= i. Checked by dependence: moving value j changes output
// row i exactly when j <= i, for fewer, as many and more queries than values.
TEST(MultiHeadAttention, CausalMaskIsTopLeftForAnyLengths) {
  for (const auto& [tq, tk] : std::vector<std::pair<int64_t, int64_t>>{{3, 5}, {5, 3}, {4, 4}}) {
    SCOPED_TRACE(std::to_string(tq) + " queries, " + std::to_string(tk) + " values");
    auto q_in = Input({tq, 6}, DType::F32, "q"), v_in = Input({tk, 6}, DType::F32, "v");
    auto out = MultiHeadAttention(
        2, 4, MultiHeadAttentionOptions().use_causal_mask(true))(std::vector{q_in, v_in});
    Model model({q_in, v_in}, out);
    model.set_seed(3);
    const Tensor q = random_tensor({2, tq, 6}, 71), v = random_tensor({2, tk, 6}, 72);
    const Tensor base = model.predict(ModelInputs{{"q", q}, {"v", v}});
    for (int64_t j = 0; j < tk; ++j) {
      Tensor moved = v.clone();
      for (int64_t c = 0; c < 6; ++c) moved.f32()[j * 6 + c] += 1.0f;  // example 0, position j
      const Tensor got = model.predict(ModelInputs{{"q", q}, {"v", moved}});
      for (int64_t i = 0; i < tq; ++i) {
        double change = 0;
        for (int64_t c = 0; c < 6; ++c)
          change = std::max<double>(change, std::abs(got.f32()[i * 6 + c] - base.f32()[i * 6 + c]));
        EXPECT_EQ(change > 1e-5, j <= i) << "row " << i << ", value " << j << ": " << change;
      }
    }
  }
}

}  // namespace
}  // namespace autoshard
