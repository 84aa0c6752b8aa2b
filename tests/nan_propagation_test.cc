// NaN and infinity propagate through every kernel as through PyTorch's ops:
// a NaN (or inf) in an input gives NaN (or inf) in the output exactly where
// PyTorch's op does, never a finite number (a silently finite loss hides a
// diverged model from TerminateOnNaN and the CLI's non-finite loss check).
// The expectations are PyTorch's by definition; tools/nan_semantics.py
// prints them from torch for the elementwise functions.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "autoshard/io/npy.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/model.h"
#include "autoshard/optim/composed_ops.h"
#include "autoshard/optim/keras_optimizers.h"
#include "autoshard/plan/distribution.h"
#include "cli_runner.h"
#include "tensor/lanes.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::random_tensor;

// One character per element: 'n' NaN, '+' +inf, '-' -inf, 'f' finite.
std::string kinds(const Tensor& t) {
  std::string s;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = t.f32()[i];
    s += std::isnan(v) ? 'n' : (std::isinf(v) ? (v > 0 ? '+' : '-') : 'f');
  }
  return s;
}

Tensor from(Shape shape, std::vector<float> values) {
  Tensor t(std::move(shape));
  std::copy(values.begin(), values.end(), t.f32());
  return t;
}

// f applied to x (one input "x"), evaluated on one device.
template <typename F>
Tensor run(const Tensor& x, F f) {
  Graph g;
  Value y = f(g.input("x", x.shape()));
  return testing::evaluate(g, {{"x", x}}, {y.id})[0];
}

// The gradient of sum(f(x) * dy) with respect to x.
template <typename F>
Tensor grad(const Tensor& x, const Tensor& dy, F f) {
  Graph g;
  Value xv = g.input("x", x.shape());
  Value y = f(xv);
  Value l = ops::reduce_sum(y * g.input("dy", dy.shape()), {0});
  while (l.rank() > 0) l = ops::reduce_sum(l, {0});
  Value dx = gradients(l, {xv})[0];
  return testing::evaluate(g, {{"x", x}, {"dy", dy}}, {dx.id})[0];
}

const float kNan = NAN, kInf = INFINITY;

// x = [NaN, +inf, -inf, -0, 1, -1] through each activation, as
// tools/nan_semantics.py lists PyTorch's results.
TEST(NanPropagation, ActivationsAsPyTorch) {
  const Tensor x = from({6}, {kNan, kInf, -kInf, -0.0f, 1.0f, -1.0f});
  struct Case {
    const char* name;
    std::function<Value(Value)> f;
    const char* want;
  };
  const auto unary = [](UnaryFn fn, double a = 0) {
    return [fn, a](Value v) { return ops::unary(v, fn, a); };
  };
  const std::vector<Case> cases = {
      {"relu", [](Value v) { return ops::relu(v); }, "n+ffff"},
      {"gelu", [](Value v) { return ops::gelu(v, false); }, "n+nfff"},
      {"gelu_tanh", [](Value v) { return ops::gelu(v, true); }, "n+nfff"},
      {"silu", [](Value v) { return ops::silu(v); }, "n+nfff"},
      {"tanh", [](Value v) { return ops::tanh(v); }, "nfffff"},
      {"sigmoid", unary(UnaryFn::Sigmoid), "nfffff"},
      {"relu6", unary(UnaryFn::Relu6), "nfffff"},
      {"hard_sigmoid", unary(UnaryFn::HardSigmoid), "nfffff"},
      {"hard_silu", unary(UnaryFn::HardSilu), "n+nfff"},
      {"leaky_relu", unary(UnaryFn::LeakyRelu, 0.3), "n+-fff"},
      {"elu", unary(UnaryFn::Elu, 1.0), "n+ffff"},
      {"selu", unary(UnaryFn::Selu), "n+ffff"},
      {"softplus", unary(UnaryFn::Softplus), "n+ffff"},
      {"softsign", unary(UnaryFn::Softsign), "nnnfff"},
      {"mish", unary(UnaryFn::Mish), "n+nfff"},
      {"exp", unary(UnaryFn::Exp), "n+ffff"},
      {"log", unary(UnaryFn::Log), "n+n-fn"},
      {"sqrt", unary(UnaryFn::Sqrt), "n+nffn"},
      {"rsqrt", unary(UnaryFn::Rsqrt), "nfn-fn"},
      {"square", unary(UnaryFn::Square), "n++fff"},
      {"abs", unary(UnaryFn::Abs), "n++fff"},
      {"soft_cap", unary(UnaryFn::SoftCap, 2.0), "nfffff"},
      {"scale", [](Value v) { return ops::scale(v, 2.0); }, "n+-fff"},
  };
  for (const Case& c : cases) EXPECT_EQ(kinds(run(x, c.f)), c.want) << c.name;
  // relu(-0) is -0 and relu(-inf) is 0, as PyTorch's.
  const Tensor r = run(x, [](Value v) { return ops::relu(v); });
  EXPECT_TRUE(std::signbit(r.f32()[3]));
  EXPECT_EQ(r.f32()[2], 0.0f);
}

// Long vectors (many vector lanes and a tail) with a NaN at any position.
TEST(NanPropagation, FastExpAndTanhKeepNanAndOverflow) {
  for (int at : {0, 5, 16, 37}) {
    Tensor x = random_tensor({40}, 1, 3.0f);
    x.f32()[at] = kNan;
    std::string want(40, 'f');
    want[at] = 'n';
    for (UnaryFn fn : {UnaryFn::Sigmoid, UnaryFn::Exp})
      EXPECT_EQ(kinds(run(x, [fn](Value v) { return ops::unary(v, fn); })), want) << at;
    EXPECT_EQ(kinds(run(x, [](Value v) { return ops::tanh(v); })), want) << at;
    EXPECT_EQ(kinds(run(x, [](Value v) { return ops::gelu(v); })), want) << at;
  }
  // exp overflows to inf above log(FLT_MAX), as std::exp in float.
  const Tensor big = from({3}, {88.0f, 89.0f, 1000.0f});
  EXPECT_EQ(kinds(run(big, [](Value v) { return ops::unary(v, UnaryFn::Exp); })), "f++");
  // sigmoid's far tails stay 0 and 1 and its gradient 0 (not inf * 0).
  const Tensor tails = from({4}, {-1000.0f, -90.0f, 90.0f, 1000.0f});
  EXPECT_EQ(kinds(grad(tails, from({4}, {1, 1, 1, 1}),
                       [](Value v) { return ops::unary(v, UnaryFn::Sigmoid); })),
            "ffff");
}

// Gradients: NaN in dy stays NaN where the derivative passes it, and relu's
// gradient at a NaN x passes dy (PyTorch's threshold_backward).
TEST(NanPropagation, ActivationGradients) {
  const Tensor x = from({4}, {kNan, 1.0f, -1.0f, 2.0f});
  const Tensor dy = from({4}, {1.0f, kNan, 1.0f, 1.0f});
  EXPECT_EQ(kinds(grad(x, dy, [](Value v) { return ops::relu(v); })), "fnff");
  EXPECT_EQ(grad(x, dy, [](Value v) { return ops::relu(v); }).f32()[0], 1.0f);
  for (auto f : std::vector<std::function<Value(Value)>>{
           [](Value v) { return ops::gelu(v); }, [](Value v) { return ops::tanh(v); },
           [](Value v) { return ops::silu(v); }, [](Value v) { return ops::sigmoid(v); }})
    EXPECT_EQ(kinds(grad(x, dy, f)), "nnff");
}

// Dropout multiplies by its mask, as PyTorch: a dropped NaN or inf is NaN.
TEST(NanPropagation, DropoutKeepsNan) {
  Tensor x({64});
  std::fill_n(x.f32(), 32, kNan);
  std::fill_n(x.f32() + 32, 32, kInf);
  const Tensor y = run(x, [](Value v) { return ops::dropout(v, 0.5, 7); });
  EXPECT_EQ(kinds(y).substr(0, 32), std::string(32, 'n'));
  for (int64_t i = 32; i < 64; ++i) EXPECT_FALSE(std::isfinite(y.f32()[i])) << i;
}

// Row reductions: a NaN anywhere in a row makes that row's result NaN, and
// only that row's; an inf in a softmax row makes it NaN (inf - inf).
TEST(NanPropagation, RowReductions) {
  const int64_t cols = 37;  // two vector blocks and a tail
  for (int at : {0, 15, 16, 36}) {
    for (float bad : {kNan, kInf}) {
      Tensor x = random_tensor({3, cols}, 2);
      x.f32()[cols + at] = bad;  // row 1
      const std::string nan_row =
          std::string(cols, 'f') + std::string(cols, 'n') + std::string(cols, 'f');
      EXPECT_EQ(kinds(run(x, [](Value v) { return ops::softmax(v); })), nan_row) << at;
      EXPECT_EQ(kinds(run(x, [](Value v) { return ops::log_softmax(v); })), nan_row) << at;
      EXPECT_EQ(kinds(run(x, [](Value v) { return ops::normalize(v, 1e-5); })), nan_row) << at;
      const Tensor sums = run(x, [](Value v) { return ops::reduce_sum(v, {1}); });
      EXPECT_EQ(kinds(sums), std::isnan(bad) ? "fnf" : "f+f") << at;
      Graph g;
      Value ce = ops::cross_entropy(g.input("x", x.shape()), g.input("t", {3}, DType::I32));
      Tensor t({3}, DType::I32);
      t.i32()[0] = 1, t.i32()[1] = 2, t.i32()[2] = 3;
      EXPECT_EQ(kinds(testing::evaluate(g, {{"x", x}, {"t", t}}, {ce.id})[0]), "fnf") << at;
    }
  }
}

// lane_max (the row maxima of softmax and cross-entropy): NaN anywhere is
// NaN, infinities are the maxima they are (its exact second pass).
TEST(NanPropagation, LaneMaxOfNanAndInfinities) {
  for (int64_t n : {1, 16, 37, 1000}) {
    for (int64_t at : {int64_t{0}, n / 2, n - 1}) {
      std::vector<float> x(static_cast<size_t>(n), -kInf);
      x[at] = kNan;
      EXPECT_TRUE(std::isnan(lane_max(x.data(), n))) << n << " " << at;
      x[at] = 2.0f;
      EXPECT_EQ(lane_max(x.data(), n), 2.0f) << n << " " << at;
      x[at] = kInf;
      EXPECT_EQ(lane_max(x.data(), n), kInf) << n << " " << at;
      x.assign(static_cast<size_t>(n), 3e38f);  // the lanes' sums overflow
      x[at] = 3.1e38f;
      EXPECT_EQ(lane_max(x.data(), n), 3.1e38f) << n << " " << at;
    }
  }
  EXPECT_TRUE(std::isnan(nan_max(1.0f, kNan)));
  EXPECT_TRUE(std::isnan(nan_max(kNan, 1.0f)));
  EXPECT_EQ(nan_max(-kInf, 1.0f), 1.0f);
}

// Max pooling (and global max pooling: one window over everything): a
// window holding a NaN gives NaN; the gradient goes to the NaN.
TEST(NanPropagation, MaxPooling) {
  Tensor x = from({1, 6, 1}, {1, kNan, 2, 3, 5, 4});
  PoolAttrs window2{.max = true, .window = {2}, .strides = {2}, .pad_lo = {0}, .pad_hi = {0}};
  EXPECT_EQ(kinds(run(x, [&](Value v) { return ops::pool(v, window2); })), "nff");
  PoolAttrs global{.max = true, .window = {6}, .strides = {1}, .pad_lo = {0}, .pad_hi = {0}};
  EXPECT_EQ(kinds(run(x, [&](Value v) { return ops::pool(v, global); })), "n");
  const Tensor dx = grad(x, from({1, 1, 1}, {1}), [&](Value v) { return ops::pool(v, global); });
  EXPECT_EQ(dx.f32()[1], 1.0f);
  EXPECT_EQ(dx.f32()[4], 0.0f);
  // Many channels (the vectorised loop) with a NaN in one.
  Tensor wide = random_tensor({1, 4, 40}, 3);
  wide.f32()[2 * 40 + 17] = kNan;
  PoolAttrs all{.max = true, .window = {4}, .strides = {1}, .pad_lo = {0}, .pad_hi = {0}};
  std::string want(40, 'f');
  want[17] = 'n';
  EXPECT_EQ(kinds(run(wide, [&](Value v) { return ops::pool(v, all); })), want);
}

// Fused attention: a NaN query row gives that row NaN; a NaN key gives NaN
// to the queries that see it (causal: the later ones) and no other; a NaN
// value row at least to the queries that see it (an earlier query of the
// same tile may get 0 * NaN = NaN through the tile's product, as PyTorch's
// unfused attention does for every earlier query).
TEST(NanPropagation, Attention) {
  const int64_t t = 5, dk = 4;
  const auto attend = [&](const Tensor& q, const Tensor& k, const Tensor& v, bool causal) {
    Graph g;
    Value o = ops::attention(g.input("q", q.shape()), g.input("k", k.shape()),
                             g.input("v", v.shape()), causal, 0.5);
    return kinds(testing::evaluate(g, {{"q", q}, {"k", k}, {"v", v}}, {o.id})[0]);
  };
  const auto rows = [&](std::string per_row) {
    std::string s;
    for (char c : per_row) s += std::string(dk, c);
    return s;
  };
  const Tensor clean = random_tensor({1, t, 1, dk}, 4);
  Tensor q = clean.clone();
  q.f32()[2 * dk + 1] = kNan;
  EXPECT_EQ(attend(q, clean, clean, false), rows("ffnff"));
  EXPECT_EQ(attend(q, clean, clean, true), rows("ffnff"));
  Tensor k = clean.clone();
  k.f32()[2 * dk] = kNan;
  EXPECT_EQ(attend(clean, k, clean, false), rows("nnnnn"));
  EXPECT_EQ(attend(clean, k, clean, true), rows("ffnnn"));
  // A +inf score (q . k with k = inf, q > 0): inf - inf in the softmax.
  Tensor positive = clean.clone();
  for (int64_t i = 0; i < t; ++i) positive.f32()[i * dk] = 1.0f;
  k.f32()[2 * dk] = kInf;
  EXPECT_EQ(attend(positive, k, clean, true).substr(2 * dk), rows("nnn"));
  Tensor v = clean.clone();
  std::fill_n(v.f32() + 2 * dk, dk, kNan);
  EXPECT_EQ(attend(clean, clean, v, true).substr(2 * dk), rows("nnn"));
  // The gradient of a NaN row is NaN too (its log-sum-exp keeps the NaN).
  Graph g;
  Value qv = g.input("q", q.shape());
  Value o = ops::attention(qv, g.input("k", q.shape()), g.input("v", q.shape()), true, 0.5);
  Value l = o;
  while (l.rank() > 0) l = ops::reduce_sum(l, {0});
  Value dq = gradients(l, {qv})[0];
  const std::string got =
      kinds(testing::evaluate(g, {{"q", q}, {"k", clean}, {"v", clean}}, {dq.id})[0]);
  EXPECT_EQ(got.substr(2 * dk, dk), std::string(dk, 'n'));
}

// Products: a NaN times a zero weight is NaN (one row runs as GEMV).
TEST(NanPropagation, EinsumWithZeroWeights) {
  for (int64_t rows : {1, 3}) {
    Tensor x = random_tensor({rows, 8}, 5);
    x.f32()[3] = kNan;
    Tensor w({8, 4});
    std::fill_n(w.f32(), w.numel(), 0.0f);
    Graph g;
    Value y = ops::einsum("bi,io->bo", g.input("x", x.shape()), g.input("w", w.shape()));
    const std::string got = kinds(testing::evaluate(g, {{"x", x}, {"w", w}}, {y.id})[0]);
    EXPECT_EQ(got, std::string(4, 'n') + std::string((rows - 1) * 4, 'f')) << rows;
  }
}

// maximum, minimum and clip (Keras's probability clipping) keep NaN.
TEST(NanPropagation, ComposedMaximumMinimumClip) {
  const Tensor x = from({4}, {kNan, 0.5f, -3.0f, 3.0f});
  EXPECT_EQ(kinds(run(x, [](Value v) { return composed::clip(v, 1e-7, 1 - 1e-7); })), "nfff");
  EXPECT_EQ(
      kinds(run(x, [](Value v) { return composed::maximum(v, ops::constant(*v.graph, {}, 0.0)); })),
      "nfff");
  EXPECT_EQ(
      kinds(run(x, [](Value v) { return composed::minimum(v, ops::constant(*v.graph, {}, 0.0)); })),
      "nfff");
}

// Gradient clipping by norm: a NaN gradient makes the scale NaN (torch's
// clip_grad_norm_), not 1.
TEST(NanPropagation, ClipScaleOfANanNorm) {
  Tensor x = random_tensor({20}, 6);
  x.f32()[9] = kNan;
  EXPECT_EQ(kinds(run(x,
                      [](Value v) {
                        Graph& g = *v.graph;
                        return g.add(Op::ClipScale, {g.add(Op::SumSquares, {v})}, ClipAttrs{1.0});
                      })),
            "n");
}

// Every loss of one NaN prediction row is NaN; an infinite logit is not
// finite either.
TEST(NanPropagation, LossesOfANanRow) {
  Tensor p = random_tensor({4, 5}, 7);
  for (int64_t i = 0; i < p.numel(); ++i) p.f32()[i] = 0.05f + std::abs(p.f32()[i]);
  Tensor onehot({4, 5}), binary({4, 5});
  Tensor ids({4}, DType::I32);
  for (int r = 0; r < 4; ++r) {
    ids.i32()[r] = r;
    for (int c = 0; c < 5; ++c) {
      onehot.f32()[r * 5 + c] = c == r ? 1.0f : 0.0f;
      binary.f32()[r * 5 + c] = (r + c) % 2;
    }
  }
  const auto loss_of = [&](const Loss& loss, const Tensor& pred, const Tensor& target) {
    Graph g;
    Value l = loss(g.input("p", pred.shape()), g.input("t", target.shape(), target.dtype()));
    return testing::evaluate(g, {{"p", pred}, {"t", target}}, {l.id})[0].item();
  };
  for (float bad : {kNan, kInf}) {
    Tensor q = p.clone();
    q.f32()[2 * 5 + 3] = bad;  // row 2, not its target class
    const bool nan = std::isnan(bad);
    for (bool logits : {true, false}) {
      const std::string how =
          std::string(logits ? "logits" : "probabilities") + (nan ? " nan" : " inf");
      EXPECT_FALSE(std::isfinite(
          loss_of(losses::SparseCategoricalCrossentropy({.from_logits = logits}), q, ids)))
          << how;
      EXPECT_FALSE(std::isfinite(
          loss_of(losses::CategoricalCrossentropy({.from_logits = logits}), q, onehot)))
          << how;
      EXPECT_FALSE(
          std::isfinite(loss_of(losses::BinaryCrossentropy({.from_logits = logits}), q, binary)))
          << how;
    }
    EXPECT_FALSE(std::isfinite(loss_of(losses::MeanSquaredError(), q, binary)));
    EXPECT_FALSE(std::isfinite(loss_of(losses::MeanAbsoluteError(), q, binary)));
    EXPECT_FALSE(std::isfinite(loss_of(losses::Huber(), q, binary)));
  }
  // The probability losses of a NaN are NaN exactly (the clip keeps it).
  Tensor q = p.clone();
  q.f32()[7] = kNan;
  EXPECT_TRUE(std::isnan(loss_of(losses::SparseCategoricalCrossentropy(), q, ids)));
  EXPECT_TRUE(std::isnan(loss_of(losses::BinaryCrossentropy(), q, binary)));
}

// The bug this file was written for: Dense -> relu -> Dense -> softmax with
// sparse cross-entropy from probabilities (Keras's defaults) gave a finite
// loss for a NaN input row. The loss is NaN on one device and on a mesh.
TEST(NanPropagation, KerasModelLossOfANanInputRow) {
  Tensor x = random_tensor({8, 6}, 8);
  x.f32()[5 * 6 + 2] = kNan;
  Tensor y({8}, DType::I32);
  for (int i = 0; i < 8; ++i) y.i32()[i] = i % 3;
  for (const char* spec : {"", "data=2,model=2"}) {
    auto in = Input({6});
    auto h = Dense(8, DenseOptions().activation("relu"))(in);
    auto model =
        std::make_unique<Model>(std::vector{in}, Dense(3, DenseOptions().activation("softmax"))(h));
    model->set_seed(1);
    if (*spec)
      model->set_distribution(
          std::make_shared<AutoShard>(DeviceMesh::parse(spec), "data", AutoShardOptions{}));
    model->compile(optimizers::SGD({.learning_rate = 0.1}),
                   losses::SparseCategoricalCrossentropy());
    EXPECT_TRUE(std::isnan(model->evaluate(x, y, 8))) << spec;
    const Tensor p = model->predict(x, 8);
    EXPECT_EQ(kinds(p).substr(5 * 3, 3), "nnn") << spec;
    EXPECT_EQ(kinds(p).substr(0, 3), "fff") << spec;
    const History hist = model->fit(x, y, {.batch_size = 8, .epochs = 1, .verbose = false});
    EXPECT_TRUE(std::isnan(hist.loss.back())) << spec;
  }
}

// `autoshard train` stops at a non-finite loss with one error line, on one
// device and on a mesh (its data must be finite, so the loss overflows: a
// target of 3e38 squares to inf).
class NanPropagationCli : public testing::TempDirTest {};
TEST_F(NanPropagationCli, TrainStopsAtANonFiniteLoss) {
  const std::string model =
      std::string(AUTOSHARD_TEST_DATA) + "/keras_files/batch_normalization_dense.keras";
  const std::string x = (dir_ / "x.npy").string(), y = (dir_ / "y.npy").string();
  Tensor targets({8, 3});
  std::fill_n(targets.f32(), targets.numel(), 0.0f);
  targets.f32()[5 * 3 + 1] = 3e38f;
  std::ofstream(x, std::ios::binary) << npy_bytes(random_tensor({8, 7}, 9));
  std::ofstream(y, std::ios::binary) << npy_bytes(targets);
  for (const char* mesh : {"", " --mesh data=2,model=2"}) {
    const cli_runner::Result r = cli_runner::run("train --model " + model + " --x " + x + " --y " +
                                                 y + " --verbose 0" + mesh);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(cli_runner::count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_NE(r.output.find("training diverged: the loss is infinite at step 1"), std::string::npos)
        << r.output;
  }
}

}  // namespace
}  // namespace autoshard
