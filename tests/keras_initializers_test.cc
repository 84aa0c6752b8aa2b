// Keras's initializers: glorot's fans for kernels of rank > 2, orthogonal
// (Keras's recurrent default), LSTM's unit_forget_bias, and the variance-scaling
// family with its truncated normal.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "autoshard/autoshard.h"
#include "autoshard/nn/recurrent_layers.h"
#include "autoshard/nn/weight_store.h"
#include "autoshard/tensor/parallel.h"
#include "tensor/rng.h"

namespace autoshard {
namespace {

// max |(M M^T)[i][j] - scale * delta_ij| over the r x c matrix M (rows
// orthonormal: r <= c), or of M^T M when `columns`.
double orthonormality_error(const float* m, int64_t r, int64_t c, bool columns, double scale) {
  const int64_t n = columns ? c : r, len = columns ? r : c;
  auto at = [&](int64_t vec, int64_t k) { return columns ? m[k * c + vec] : m[vec * c + k]; };
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < len; ++k) dot += double(at(i, k)) * at(j, k);
      worst = std::max(worst, std::fabs(dot - (i == j ? scale : 0.0)));
    }
  return worst;
}

TEST(KerasInitializers, GlorotCountsTheReceptiveFieldInBothFans) {
  // Conv2D kernel [3, 3, 4, 5]: fan_in 36, fan_out 45 (Keras), limit
  // sqrt(6 / 81); counting fan_out as 5 would allow up to sqrt(6 / 41).
  const Tensor k = Initializer::glorot_uniform().make("conv.kernel", {3, 3, 4, 5}, 1);
  const double limit = std::sqrt(6.0 / 81.0);
  float top = 0;
  for (float v : k.to_vector()) top = std::max(top, std::fabs(v));
  EXPECT_LE(top, limit);
  EXPECT_GT(top, 0.95 * limit);
  // Rank 2 and 1 as before: [in, out], and fan_in = fan_out = size.
  const Tensor d = Initializer::glorot_uniform().make("dense.kernel", {30, 10}, 1);
  top = 0;
  for (float v : d.to_vector()) top = std::max(top, std::fabs(v));
  EXPECT_LE(top, std::sqrt(6.0 / 40.0));
  EXPECT_GT(top, 0.9 * std::sqrt(6.0 / 40.0));
}

TEST(KerasInitializers, OrthogonalHasOrthonormalRowsOrColumns) {
  // Wide [8, 32] (an LSTM's recurrent kernel of 8 units): rows; tall: columns;
  // rank 3 flattened to [12, 6]: columns; square; gain scales.
  const Tensor wide = Initializer::orthogonal().make("a", {8, 32}, 3);
  EXPECT_LT(orthonormality_error(wide.f32(), 8, 32, false, 1.0), 1e-5);
  const Tensor tall = Initializer::orthogonal().make("b", {32, 8}, 3);
  EXPECT_LT(orthonormality_error(tall.f32(), 32, 8, true, 1.0), 1e-5);
  const Tensor cube = Initializer::orthogonal().make("c", {3, 4, 6}, 3);
  EXPECT_LT(orthonormality_error(cube.f32(), 12, 6, true, 1.0), 1e-5);
  const Tensor square = Initializer::orthogonal(2.0).make("d", {16, 16}, 3);
  EXPECT_LT(orthonormality_error(square.f32(), 16, 16, false, 4.0), 1e-5);
  EXPECT_LT(orthonormality_error(square.f32(), 16, 16, true, 4.0), 1e-5);
  // Another seed or path, another matrix; element by element as whole.
  const Tensor other = Initializer::orthogonal().make("a", {8, 32}, 4);
  EXPECT_NE(wide.f32()[0], other.f32()[0]);
  for (int64_t i : {0, 37, 255})
    EXPECT_EQ(Initializer::orthogonal().value("a", {8, 32}, 3, i), wide.f32()[i]);
  EXPECT_EQ(Initializer::from_name("orthogonal").kind, Initializer::Kind::Orthogonal);
}

// Keras's Q: that of the QR factorisation of the normal draw (the flat
// [max, min] matrix, row-major) whose R has a positive diagonal. So Q^T A
// is upper triangular with a positive diagonal.
TEST(KerasInitializers, OrthogonalIsTheQOfThePositiveDiagonalQR) {
  const int64_t m = 20, n = 6;
  const Tensor q = Initializer::orthogonal().make("w", {m, n}, 9);
  const CounterRng rng(stable_hash("w") ^ (9 * 0x9E3779B97F4A7C15ull), 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double r = 0;  // (Q^T A)[i][j]
      for (int64_t k = 0; k < m; ++k) r += double(q.f32()[k * n + i]) * rng.normal(k * n + j);
      if (i > j) {
        EXPECT_NEAR(r, 0.0, 1e-5) << i << "," << j;
      } else if (i == j) {
        EXPECT_GT(r, 0.0) << i;
      }
    }
}

TEST(KerasInitializers, LstmStartsWithForgetBiasOneAndOrthogonalRecurrentKernel) {
  auto bias_of = [](LSTMOptions o) {
    auto in = Input({4, 3});
    Sequential model(in, {LSTM(5, o.name("lstm"))});
    model.compile(SGD(), losses::mean_squared_error);
    return std::pair{model.gather_weight("lstm.bias"),
                     model.gather_weight("lstm.recurrent_kernel")};
  };
  const auto [bias, recurrent] = bias_of(LSTMOptions());
  for (int64_t e = 0; e < 20; ++e) EXPECT_EQ(bias.f32()[e], e / 5 == 1 ? 1.0f : 0.0f) << e;
  EXPECT_LT(orthonormality_error(recurrent.f32(), 5, 20, false, 1.0), 1e-5);
  const auto [plain, unused] = bias_of(LSTMOptions().unit_forget_bias(false));
  for (float v : plain.to_vector()) EXPECT_EQ(v, 0.0f);
  const auto [ones, unused2] = bias_of(LSTMOptions().bias_initializer(Initializer::constant(0.5)));
  for (int64_t e = 0; e < 20; ++e) EXPECT_EQ(ones.f32()[e], e / 5 == 1 ? 1.0f : 0.5f) << e;
}

LayoutMap split_columns() {
  LayoutMap map;
  map["gru\\.recurrent_kernel$"] = {std::nullopt, "model"};
  return map;
}

// A sharded recurrent kernel starts from the same orthogonal matrix as one
// device's (each device reads its block of the one factorisation).
TEST(KerasInitializers, OrthogonalBlocksOnAMeshEqualOneDevice) {
  auto weight = [](std::shared_ptr<Distribution> dist) {
    auto in = Input({4, 3});
    Sequential model(in, {GRU(6, GRUOptions().name("gru")), Dense(2, DenseOptions().name("d"))});
    if (dist) model.set_distribution(dist);
    model.compile(SGD({.learning_rate = 0.0}), losses::mean_squared_error);
    model.train_on_batch(Tensor::zeros({6, 4, 3}), Tensor::zeros({6, 2}));  // places the blocks
    return model.gather_weight("gru.recurrent_kernel");
  };
  const Tensor one = weight(nullptr);
  const Tensor mesh =
      weight(std::make_shared<ModelParallel>(DeviceMesh({3}, {"model"}), split_columns()));
  ASSERT_EQ(one.shape(), mesh.shape());
  for (int64_t e = 0; e < one.numel(); ++e) EXPECT_EQ(one.f32()[e], mesh.f32()[e]);
}

// Weights are drawn on every core, each element from its own counter: the
// values are Initializer::make's (drawn in order on one thread) whatever the
// number of cores, and a device's block holds the same values as that part
// of the whole, in uneven blocks too.
TEST(KerasInitializers, WeightsAreTheSameOnAnyNumberOfCores) {
  const Shape shape{301, 257};  // several parallel chunks, uneven over 3
  const Initializer init = Initializer::normal(0.0, 1.0);
  const Tensor drawn_in_order = init.make("w", shape, 7);
  for (int cores : {1, 2, 3}) {
    IntraOpThreadsScope scope(cores);
    WeightStore store(7);
    store.declare({"w", ""}, shape, init);
    store.place_on(DeviceMesh({3}, {"x"}), {0, 1, 2});
    Sharding columns = Sharding::replicated(2);
    columns.dims[1] = 0;
    for (int device = 0; device < 3; ++device) {
      const Tensor& block = store.block({"w", ""}, columns, device);
      const int64_t first = columns.offsets(shape, store.mesh(), device)[1];
      const int64_t width = block.shape()[1];
      for (int64_t r = 0; r < shape[0]; ++r)
        for (int64_t c = 0; c < width; ++c)
          ASSERT_EQ(block.f32()[r * width + c], drawn_in_order.f32()[r * shape[1] + first + c])
              << cores << " cores, device " << device << " at " << r << ", " << c;
    }
  }
}

// Keras's VarianceScaling (keras/src/initializers/random_initializers.py):
// the drawn stddev is sqrt(scale / n) (after the cut, for a truncated
// normal), n the fan the mode picks; a truncated normal never passes
// two of its pre-cut stddevs, and the whole range is used.
TEST(KerasInitializers, VarianceScalingFollowsKerassFormula) {
  using I = Initializer;
  const Shape shape{3, 3, 40, 60};  // fan_in 360, fan_out 540
  struct Case {
    I init;
    double n;
    bool truncated;
  };
  const std::vector<Case> cases = {
      {I::from_name("he_normal"), 360.0 / 2, true},
      {I::from_name("lecun_uniform"), 360.0, false},
      {I::from_name("glorot_normal"), 450.0, true},
      {I::variance_scaling(3, I::FanMode::FanOut, I::Distribution::UntruncatedNormal), 540.0 / 3,
       false},
  };
  for (const Case& c : cases) {
    const std::vector<float> v = c.init.make("w", shape, 5).to_vector();
    double sum = 0, sq = 0, top = 0;
    for (float x : v) sum += x, sq += double(x) * x, top = std::max(top, std::fabs(double(x)));
    const double mean = sum / double(v.size()), sd = std::sqrt(sq / double(v.size()) - mean * mean);
    const double want = std::sqrt(1.0 / c.n);
    EXPECT_NEAR(sd, want, 0.02 * want);
    EXPECT_NEAR(mean, 0.0, 0.02 * want);
    if (c.truncated) {
      EXPECT_LE(top, 2 * want / 0.87962566103423978 + 1e-6);
      EXPECT_GT(top, 1.9 * want / 0.87962566103423978);
    }
  }
  EXPECT_THROW(I::from_name("he_normall"), Error);
  EXPECT_THROW(I::fan_mode("fan"), Error);
  EXPECT_THROW(I::identity().make("w", {2, 2, 2}, 0), Error);
  const Tensor eye = I::identity(3.0).make("w", {2, 3}, 0);
  EXPECT_EQ(eye.to_vector(), (std::vector<float>{3, 0, 0, 0, 3, 0}));
}

// A truncated normal redraws element by element: a device's block of a
// weight holds the values of that part of the whole.
TEST(KerasInitializers, TruncatedBlocksEqualTheWhole) {
  const Shape shape{37, 29};
  const Initializer init = Initializer::from_name("he_normal");
  const Tensor whole = init.make("w", shape, 3);
  WeightStore store(3);
  store.declare({"w", ""}, shape, init);
  store.place_on(DeviceMesh({3}, {"x"}), {0, 1, 2});
  Sharding rows = Sharding::replicated(2);
  rows.dims[0] = 0;
  for (int device = 0; device < 3; ++device) {
    const Tensor& block = store.block({"w", ""}, rows, device);
    const int64_t first = rows.offsets(shape, store.mesh(), device)[0];
    for (int64_t e = 0; e < block.numel(); ++e)
      ASSERT_EQ(block.f32()[e], whole.f32()[first * shape[1] + e]) << device << " at " << e;
  }
}

}  // namespace
}  // namespace autoshard
