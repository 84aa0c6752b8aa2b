// The convolution, pooling and image layers: Keras's weight names and shapes,
// forward values against loops written here from Keras's definitions, the
// activations by name, and a CNN of every layer trained on meshes (AutoShard
// choosing the splits) against one device.
#include "autoshard/nn/conv_layers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/pooling_layers.h"
#include "autoshard/nn/spatial_layers.h"
#include "autoshard/plan/distribution.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::evaluate;
using testing::random_tensor;

// Traces `layer` on x [shape] in a fresh graph; returns the output with the
// weights (by path) and x filled with random values.
struct Traced {
  Graph g;
  Value y;
  std::map<std::string, Tensor> leaves;
};
std::unique_ptr<Traced> trace(const Layer& layer, Shape shape) {
  auto t = std::make_unique<Traced>();
  Value x = t->g.parameter("x", shape);
  Trace tr(t->g, false, 1);
  t->y = layer(tr, x);
  uint64_t seed = 1;
  for (int id : t->g.parameters()) {
    const Node& n = t->g.node(id);
    t->leaves[n.leaf().key()] = random_tensor(n.shape, seed++);
  }
  return t;
}
Tensor run(Traced& t) {
  return evaluate(t.g, t.leaves, {t.y.id})[0];
}
Shape weight_shape(Traced& t, const std::string& suffix) {
  for (const auto& [key, v] : t.leaves)
    if (key.size() >= suffix.size() &&
        key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0)
      return v.shape();
  return {};
}
float at(const Tensor& t, std::initializer_list<int64_t> index) {
  int64_t flat = 0, d = 0;
  for (int64_t i : index) flat = flat * t.shape()[d++] + i;
  return t.f32()[flat];
}

TEST(ConvLayers, KerasWeightShapesAndOutputShapes) {
  auto c =
      trace(Conv2D(6, {3, 2}, ConvOptions().groups(3).strides({2}).padding("same")), {2, 9, 7, 9});
  EXPECT_EQ(weight_shape(*c, ".kernel"), (Shape{3, 2, 3, 6}));
  EXPECT_EQ(weight_shape(*c, ".bias"), (Shape{6}));
  EXPECT_EQ(c->y.shape(), (Shape{2, 5, 4, 6}));
  auto d = trace(DepthwiseConv2D({3}, ConvOptions().depth_multiplier(2)), {2, 9, 7, 3});
  EXPECT_EQ(weight_shape(*d, ".kernel"), (Shape{3, 3, 3, 2}));
  EXPECT_EQ(d->y.shape(), (Shape{2, 7, 5, 6}));
  auto s = trace(SeparableConv2D(4, {3}, ConvOptions().padding("same")), {2, 9, 7, 3});
  EXPECT_EQ(weight_shape(*s, ".depthwise_kernel"), (Shape{3, 3, 3, 1}));
  EXPECT_EQ(weight_shape(*s, ".pointwise_kernel"), (Shape{1, 1, 3, 4}));
  EXPECT_EQ(s->y.shape(), (Shape{2, 9, 7, 4}));
  auto t = trace(Conv2DTranspose(5, {3}, ConvOptions().strides({2})), {2, 4, 3, 3});
  EXPECT_EQ(weight_shape(*t, ".kernel"), (Shape{3, 3, 5, 3}));
  EXPECT_EQ(t->y.shape(), (Shape{2, 9, 7, 5}));
  auto ts =
      trace(Conv2DTranspose(5, {3}, ConvOptions().strides({2}).padding("same")), {2, 4, 3, 3});
  EXPECT_EQ(ts->y.shape(), (Shape{2, 8, 6, 5}));
  auto c1 = trace(Conv1D(4, 3, ConvOptions().padding("causal").dilation_rate({2})), {2, 9, 3});
  EXPECT_EQ(c1->y.shape(), (Shape{2, 9, 4}));
  EXPECT_EQ(trace(MaxPooling2D(), {2, 9, 7, 3})->y.shape(), (Shape{2, 4, 3, 3}));
  EXPECT_EQ(trace(AveragePooling2D(PoolingOptions().pool_size({3}).strides({2}).padding("same")),
                  {2, 9, 7, 3})
                ->y.shape(),
            (Shape{2, 5, 4, 3}));
  EXPECT_EQ(trace(MaxPooling1D(), {2, 9, 3})->y.shape(), (Shape{2, 4, 3}));
  EXPECT_EQ(trace(GlobalAveragePooling2D(), {2, 9, 7, 3})->y.shape(), (Shape{2, 3}));
  EXPECT_EQ(trace(GlobalMaxPooling1D(GlobalPoolingOptions().keepdims(true)), {2, 9, 3})->y.shape(),
            (Shape{2, 1, 3}));
  EXPECT_EQ(trace(ZeroPadding2D({1, 2}), {2, 9, 7, 3})->y.shape(), (Shape{2, 11, 11, 3}));
  EXPECT_EQ(trace(Cropping2D({1, 0, 2, 1}), {2, 9, 7, 3})->y.shape(), (Shape{2, 8, 4, 3}));
  EXPECT_EQ(trace(UpSampling2D({2, 3}), {2, 9, 7, 3})->y.shape(), (Shape{2, 18, 21, 3}));
}

// Conv2DTranspose scatters each input position through the kernel:
// y[b, i * s + k - pad, co] += x[b, i, ci] * kernel[k, co, ci].
TEST(ConvLayers, Conv2DTransposeMatchesItsDefinition) {
  auto t =
      trace(Conv2DTranspose(2, {3, 2}, ConvOptions().strides({2}).padding("same").use_bias(false)),
            {1, 3, 4, 3});
  const Tensor y = run(*t), &x = t->leaves.at("x");
  Tensor w;
  for (auto& [k, v] : t->leaves)
    if (k != "x") w = v;
  ASSERT_EQ(y.shape(), (Shape{1, 6, 8, 2}));
  // 'same' for the forward conv of 6 rows, kernel 3, stride 2: its one zero
  // goes after (none before); 8 cols, kernel 2: none.
  std::vector<double> want(6 * 8 * 2, 0.0);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t kh = 0; kh < 3; ++kh)
        for (int64_t kw = 0; kw < 2; ++kw) {
          const int64_t r = i * 2 + kh, c = j * 2 + kw;
          if (r < 0 || r >= 6 || c < 0 || c >= 8) continue;
          for (int64_t co = 0; co < 2; ++co)
            for (int64_t ci = 0; ci < 3; ++ci)
              want[(r * 8 + c) * 2 + co] += at(x, {0, i, j, ci}) * at(w, {kh, kw, co, ci});
        }
  for (int64_t e = 0; e < y.numel(); ++e) EXPECT_NEAR(y.f32()[e], want[e], 1e-5) << e;
}

// Depthwise: output channel c * m + k is input channel c through kernel[.., c, k].
TEST(ConvLayers, DepthwiseConv2DMatchesItsDefinition) {
  auto t =
      trace(DepthwiseConv2D({2}, ConvOptions().depth_multiplier(2).use_bias(false)), {1, 3, 3, 2});
  const Tensor y = run(*t), &x = t->leaves.at("x");
  Tensor w;
  for (auto& [k, v] : t->leaves)
    if (k != "x") w = v;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t c = 0; c < 2; ++c)
        for (int64_t m = 0; m < 2; ++m) {
          double want = 0;
          for (int64_t kh = 0; kh < 2; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw)
              want += at(x, {0, i + kh, j + kw, c}) * at(w, {kh, kw, c, m});
          EXPECT_NEAR(at(y, {0, i, j, c * 2 + m}), want, 1e-5);
        }
}

// Keras's 'same' average pooling divides by the positions inside the image;
// 'same' max pooling ignores the padding.
TEST(PoolingLayers, SameAveragesCountOnlyTheImage) {
  auto t = trace(AveragePooling2D(PoolingOptions().pool_size({2}).padding("same")), {1, 3, 3, 1});
  Tensor& x = t->leaves.at("x");
  for (int64_t e = 0; e < 9; ++e) x.f32()[e] = float(e + 1);
  const Tensor y = run(*t);
  ASSERT_EQ(y.shape(), (Shape{1, 2, 2, 1}));
  EXPECT_FLOAT_EQ(y.f32()[0], (1 + 2 + 4 + 5) / 4.0f);
  EXPECT_FLOAT_EQ(y.f32()[1], (3 + 6) / 2.0f);
  EXPECT_FLOAT_EQ(y.f32()[2], (7 + 8) / 2.0f);
  EXPECT_FLOAT_EQ(y.f32()[3], 9.0f);
  auto m = trace(MaxPooling2D(PoolingOptions().pool_size({2}).padding("same")), {1, 3, 3, 1});
  for (int64_t e = 0; e < 9; ++e) m->leaves.at("x").f32()[e] = -float(e + 1);
  EXPECT_FLOAT_EQ(run(*m).f32()[3], -9.0f);
}

TEST(SpatialLayers, PaddingCroppingAndUpSamplingMoveValues) {
  auto p = trace(ZeroPadding2D({1, 0, 0, 2}), {1, 2, 2, 1});
  auto& x = p->leaves.at("x");
  for (int64_t e = 0; e < 4; ++e) x.f32()[e] = float(e + 1);
  Tensor y = run(*p);
  ASSERT_EQ(y.shape(), (Shape{1, 3, 4, 1}));
  EXPECT_EQ(std::vector<float>(y.f32(), y.f32() + 12),
            (std::vector<float>{0, 0, 0, 0, 1, 2, 0, 0, 3, 4, 0, 0}));
  auto c = trace(Cropping2D({1, 0, 0, 1}), {1, 3, 3, 1});
  for (int64_t e = 0; e < 9; ++e) c->leaves.at("x").f32()[e] = float(e);
  y = run(*c);
  EXPECT_EQ(std::vector<float>(y.f32(), y.f32() + 4), (std::vector<float>{3, 4, 6, 7}));
  auto u = trace(UpSampling2D({2, 1}), {1, 2, 2, 1});
  for (int64_t e = 0; e < 4; ++e) u->leaves.at("x").f32()[e] = float(e);
  y = run(*u);
  EXPECT_EQ(std::vector<float>(y.f32(), y.f32() + 8), (std::vector<float>{0, 1, 0, 1, 2, 3, 2, 3}));
}

TEST(Activations, EveryKerasNameHasKerasValues) {
  const std::map<std::string, double> at_minus_half = {
      {"linear", -0.5},
      {"relu", 0},
      {"relu6", 0},
      {"leaky_relu", -0.1},
      {"elu", std::expm1(-0.5)},
      {"selu", 1.0507009873554805 * 1.6732632423543772 * std::expm1(-0.5)},
      {"sigmoid", 1 / (1 + std::exp(0.5))},
      {"hard_sigmoid", 2.5 / 6},
      {"hard_silu", -0.5 * 2.5 / 6},
      {"tanh", std::tanh(-0.5)},
      {"silu", -0.5 / (1 + std::exp(0.5))},
      {"swish", -0.5 / (1 + std::exp(0.5))},
      {"softplus", std::log1p(std::exp(-0.5))},
      {"softsign", -0.5 / 1.5},
      {"mish", -0.5 * std::tanh(std::log1p(std::exp(-0.5)))},
      {"exponential", std::exp(-0.5)},
      {"gelu", -0.5 * 0.5 * (1 + std::erf(-0.5 / std::sqrt(2.0)))},
  };
  for (const auto& [name, want] : at_minus_half) {
    Graph g;
    Value x = g.parameter("x", {1});
    Value y = apply_activation(x, name);
    Tensor v({1});
    v.f32()[0] = -0.5f;
    EXPECT_NEAR(evaluate(g, {{"x", v}}, {y.id})[0].f32()[0], want, 1e-6) << name;
  }
  // softmax and log_softmax over the last axis.
  Graph g;
  Value x = g.parameter("x", {2, 3});
  Value s = apply_activation(x, "softmax"), l = apply_activation(x, "log_softmax");
  Tensor v = random_tensor({2, 3}, 4, 3.0f);
  auto out = evaluate(g, {{"x", v}}, {s.id, l.id});
  for (int64_t e = 0; e < 6; ++e) EXPECT_NEAR(std::log(out[0].f32()[e]), out[1].f32()[e], 1e-5);
  EXPECT_THROW(apply_activation(x, "relu7"), Error);
}

TEST(ConvLayers, BadOptionsAreClearErrors) {
  EXPECT_THROW(Conv2D(4, {3}, ConvOptions().padding("full")), Error);
  EXPECT_THROW(Conv2D(5, {3}, ConvOptions().groups(2)), Error);
  EXPECT_THROW(Conv2D(4, {3, 3, 3}), Error);
  EXPECT_THROW(Conv2D(4, {3}, ConvOptions().strides({2}).dilation_rate({2})), Error);
  EXPECT_THROW(Conv2D(4, {3}, ConvOptions().activation("relu7")), Error);
  EXPECT_THROW(trace(Conv2D(4, {5}), {1, 3, 3, 2}), Error);  // valid: 5 does not fit 3
  EXPECT_THROW(trace(Conv2D(4, {3}), {1, 9, 3}), Error);     // not an image
  EXPECT_THROW(trace(Conv2D(4, {3}, ConvOptions().groups(4)), {1, 5, 5, 6}), Error);
  EXPECT_THROW(MaxPooling2D(PoolingOptions().pool_size({0})), Error);
  EXPECT_THROW(UpSampling2D({2}, "bilinear"), Error);
  EXPECT_THROW(trace(Cropping2D({2}), {1, 4, 4, 1}), Error);
}

// A CNN with every layer, trained 3 steps: on meshes with AutoShard choosing
// every split, the losses and weights equal one device's.
std::pair<std::vector<double>, std::vector<Tensor>> train_cnn(std::shared_ptr<Distribution> dist) {
  auto in = Input({9, 7, 3});
  // Named: initial weights are drawn by path, and default names count up.
  std::vector<Layer> layers{
      Conv2D(5, {3}, ConvOptions().strides({2}).padding("same").activation("relu").name("a")),
      DepthwiseConv2D(
          {3}, ConvOptions().padding("same").depth_multiplier(2).activation("elu").name("b")),
      SeparableConv2D(4, {3}, ConvOptions().padding("same").activation("mish").name("c")),
      MaxPooling2D(PoolingOptions().pool_size({3}).strides({1}).padding("same")),
      Conv2DTranspose(3, {3}, ConvOptions().strides({2}).activation("sigmoid").name("d")),
      ZeroPadding2D({1}),
      Cropping2D({1, 0, 0, 1}),
      UpSampling2D({2}),
      AveragePooling2D(PoolingOptions().padding("same")),
      Conv2D(3, {1}, ConvOptions().groups(3).dilation_rate({2}).name("e")),
  };
  SymbolicTensor h = in;
  for (const Layer& layer : layers) h = layer(h);
  Model model({in}, Dense(2, DenseOptions().name("f"))(GlobalAveragePooling2D()(h)));
  if (dist) model.set_distribution(dist);
  model.compile(SGD({.learning_rate = 0.1, .momentum = 0.9}), losses::mean_squared_error);
  std::vector<double> losses;
  for (int s = 0; s < 3; ++s)
    losses.push_back(
        model.train_on_batch(random_tensor({6, 9, 7, 3}, 10 + s), random_tensor({6, 2}, 20 + s)));
  std::vector<Tensor> weights;  // in creation order (names differ: conv2d, conv2d_1, ...)
  for (const std::string& p : model.weight_paths()) weights.push_back(model.gather_weight(p));
  return {losses, weights};
}

TEST(ConvLayers, ACnnOfEveryLayerTrainsAlikeOnMeshes) {
  const auto [want_losses, want_weights] = train_cnn(nullptr);
  for (const DeviceMesh& mesh :
       {DeviceMesh({2, 2}, {"data", "model"}), DeviceMesh({3}, {"model"})}) {
    const auto [losses, weights] =
        train_cnn(std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2}));
    const std::string what = "AutoShard on " + std::to_string(mesh.size()) + " devices";
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], want_losses[i], 1e-4 * want_losses[i]) << what << " step " << i;
    ASSERT_EQ(weights.size(), want_weights.size());
    for (size_t k = 0; k < weights.size(); ++k)
      EXPECT_LT(max_relative_error(weights[k], want_weights[k]), 1e-4) << what << " weight " << k;
  }
}

// Conv1D over [batch, steps, channels], causal: step t sees steps <= t only.
TEST(ConvLayers, CausalConv1DSeesNoFutureStep) {
  auto t = trace(Conv1D(2, 3, ConvOptions().padding("causal").dilation_rate({2})), {1, 7, 2});
  const Tensor before = run(*t);
  t->leaves.at("x").f32()[5 * 2] += 1.0f;  // step 5
  const Tensor after = run(*t);
  for (int64_t e = 0; e < 5 * 2; ++e) EXPECT_EQ(before.f32()[e], after.f32()[e]);
  EXPECT_NE(before.f32()[5 * 2], after.f32()[5 * 2]);
}

}  // namespace
}  // namespace autoshard
