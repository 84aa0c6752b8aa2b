// ConvLSTM2D's dropout and recurrent_dropout in training, as Keras 3's
// ConvLSTMCell.call applies them (keras/src/layers/rnn/conv_lstm.py): the
// traced step holds eight masks (four of a step's input's shape, four of
// h's), and its outputs equal a plain double-precision ConvLSTM written here
// that multiplies gate k's input by input mask k and gate k's h by
// recurrent mask k at every step, the masks read back from the step itself.
// The masks keep the rate, scale by 1 / (1 - rate), differ between gates
// and change from one training step to the next; inference draws none.
#include "autoshard/nn/conv_lstm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/runtime/executor.h"
#include "test_util.h"

// A named namespace: the unity builds (scripts/test.sh) compile this file
// with others whose file-local helpers share these names.
namespace autoshard::conv_lstm_dropout_test {

using Vec = std::vector<double>;

Vec to_vec(const Tensor& t) {
  return Vec(t.f32(), t.f32() + t.numel());
}

double sigmoid(double v) {
  return 1 / (1 + std::exp(-v));
}

struct Sizes {
  int64_t B, T, R, C, K, F;  // batch, time, rows, cols, channels, filters (kernel 3 x 3)
};

// z[b, r, c, f] += sum over the 3 x 3 window ('same', stride 1) of
// in[b, r', c', k] * w[a, e, k, gate F + f]: one gate's convolution.
void conv_gate(const Vec& in, int64_t K, const Vec& w, int64_t gate, const Sizes& s, Vec& z) {
  const int64_t G = 4 * s.F;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t r = 0; r < s.R; ++r)
      for (int64_t c = 0; c < s.C; ++c)
        for (int64_t a = 0; a < 3; ++a)
          for (int64_t e = 0; e < 3; ++e) {
            const int64_t rr = r + a - 1, cc = c + e - 1;
            if (rr < 0 || rr >= s.R || cc < 0 || cc >= s.C) continue;
            for (int64_t k = 0; k < K; ++k) {
              const double v = in[((b * s.R + rr) * s.C + cc) * K + k];
              for (int64_t f = 0; f < s.F; ++f)
                z[((b * s.R + r) * s.C + c) * G + gate * s.F + f] +=
                    v * w[((a * 3 + e) * K + k) * G + gate * s.F + f];
            }
          }
}

// Keras's ConvLSTMCell over the steps, gate k reading x_t * in_masks[k]
// and h * h_masks[k] (masks of a step's input [B, R, C, K] and of h
// [B, R, C, F]); every step's h, [T, B, R, C, F].
Vec reference(const Sizes& s, const Vec& x, const Vec& kernel, const Vec& recurrent,
              const Vec& bias, const std::vector<Vec>& in_masks, const std::vector<Vec>& h_masks) {
  const int64_t N = s.B * s.R * s.C, G = 4 * s.F, step = N * s.K;
  Vec h(N * s.F, 0.0), c(N * s.F, 0.0), out;
  for (int64_t t = 0; t < s.T; ++t) {
    Vec z(N * G, 0.0);
    for (int64_t k = 0; k < 4; ++k) {
      Vec xk(step), hk(h);
      for (int64_t b = 0; b < s.B; ++b)
        for (int64_t i = 0; i < step / s.B; ++i)
          xk[b * (step / s.B) + i] =
              x[(b * s.T + t) * (step / s.B) + i] * in_masks[k][b * (step / s.B) + i];
      for (size_t i = 0; i < hk.size(); ++i) hk[i] *= h_masks[k][i];
      conv_gate(xk, s.K, kernel, k, s, z);
      conv_gate(hk, s.F, recurrent, k, s, z);
    }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t f = 0; f < s.F; ++f) {
        auto gate = [&](int k) { return z[n * G + k * s.F + f] + bias[k * s.F + f]; };
        double& cell = c[n * s.F + f];
        cell = sigmoid(gate(1)) * cell + sigmoid(gate(0)) * std::tanh(gate(2));
        h[n * s.F + f] = sigmoid(gate(3)) * std::tanh(cell);
      }
    out.insert(out.end(), h.begin(), h.end());
  }
  return out;
}

struct Traced {
  Graph g;
  Value x, y;
  std::vector<int> masks;  // the Dropout nodes, in the order traced
  std::map<std::string, Tensor> weights;
};

// A ConvLSTM2D (3 x 3, 'same', every step returned) traced on [B, T, R, C, K].
void trace(Traced& tr, const Sizes& s, bool training, double rate, double recurrent_rate) {
  Trace t(tr.g, training, /*seed=*/4);
  tr.x = tr.g.input("x", {s.B, s.T, s.R, s.C, s.K});
  ConvLSTM2D layer(s.F, {3},
                   ConvLSTM2DOptions()
                       .padding("same")
                       .return_sequences(true)
                       .dropout(rate)
                       .recurrent_dropout(recurrent_rate)
                       .seed(9)
                       .name("cl"));
  tr.y = layer(t, {tr.x});
  uint64_t seed = 30;
  for (int id = 0; id < tr.g.size(); ++id) {
    const Node& n = tr.g.node(id);
    if (n.op == Op::Dropout) tr.masks.push_back(id);
    if (n.op == Op::Parameter)
      tr.weights[n.leaf().name] = testing::random_tensor(n.shape, seed++, 0.5f);
  }
}

// The outputs [B, T, R, C, F] and the masks of training step `step`.
std::pair<Tensor, std::vector<Tensor>> run(const Traced& tr, const Tensor& x, int64_t step) {
  std::vector<int> ids{tr.y.id};
  ids.insert(ids.end(), tr.masks.begin(), tr.masks.end());
  Executor exec(tr.g, ids);
  exec.bind(tr.x.id, x);
  for (int id : tr.g.parameters()) exec.bind(id, tr.weights.at(tr.g.node(id).leaf().name));
  exec.run({step, 0});
  std::vector<Tensor> masks;
  for (int id : tr.masks) masks.push_back(exec.value(id).clone());
  return {exec.value(tr.y.id).clone(), masks};
}

// [B, T, R, C, F] -> [T, B, R, C, F], as the reference lists its steps.
Vec time_major(const Tensor& y, const Sizes& s) {
  const Vec v = to_vec(y);
  const int64_t per = s.R * s.C * s.F;
  Vec out(v.size());
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t)
      std::copy_n(&v[(b * s.T + t) * per], per, &out[(t * s.B + b) * per]);
  return out;
}

void expect_near(const Vec& got, const Vec& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
  EXPECT_LT(worst, 2e-5) << what;
}

TEST(ConvLSTM2DDropout, TrainingStepMatchesTheReferenceWithItsOwnMasks) {
  const Sizes s{2, 3, 4, 3, 2, 3};
  const Tensor x = testing::random_tensor({s.B, s.T, s.R, s.C, s.K}, 5);
  for (const auto& [rate, recurrent_rate] :
       std::vector<std::pair<double, double>>{{0.3, 0.25}, {0.4, 0.0}, {0.0, 0.4}}) {
    SCOPED_TRACE("dropout " + std::to_string(rate) + " recurrent " +
                 std::to_string(recurrent_rate));
    Traced tr;
    trace(tr, s, /*training=*/true, rate, recurrent_rate);
    const size_t n_in = rate > 0 ? 4 : 0, n_h = recurrent_rate > 0 ? 4 : 0;
    ASSERT_EQ(tr.masks.size(), n_in + n_h);  // drawn once, not per step
    auto [y, masks] = run(tr, x, 1);
    std::vector<Vec> in_masks(4, Vec(s.B * s.R * s.C * s.K, 1.0)),
        h_masks(4, Vec(s.B * s.R * s.C * s.F, 1.0));
    for (size_t k = 0; k < n_in; ++k) {
      EXPECT_EQ(masks[k].shape(), (Shape{s.B, 1, s.R, s.C, s.K}));
      in_masks[k] = to_vec(masks[k]);
    }
    for (size_t k = 0; k < n_h; ++k) {
      EXPECT_EQ(masks[n_in + k].shape(), (Shape{s.B, s.R, s.C, s.F}));
      h_masks[k] = to_vec(masks[n_in + k]);
    }
    const Vec want = reference(s, to_vec(x), to_vec(tr.weights.at("cl.kernel")),
                               to_vec(tr.weights.at("cl.recurrent_kernel")),
                               to_vec(tr.weights.at("cl.bias")), in_masks, h_masks);
    expect_near(time_major(y, s), want, "with the masks");
    // The masks matter: without them the reference is another answer.
    const std::vector<Vec> ones_in(4, Vec(in_masks[0].size(), 1.0)),
        ones_h(4, Vec(h_masks[0].size(), 1.0));
    const Vec plain = reference(s, to_vec(x), to_vec(tr.weights.at("cl.kernel")),
                                to_vec(tr.weights.at("cl.recurrent_kernel")),
                                to_vec(tr.weights.at("cl.bias")), ones_in, ones_h);
    double differ = 0;
    for (size_t i = 0; i < plain.size(); ++i)
      differ = std::max(differ, std::fabs(plain[i] - want[i]));
    EXPECT_GT(differ, 1e-2);

    // Inference draws no mask: the plain reference.
    Traced inference;
    trace(inference, s, /*training=*/false, rate, recurrent_rate);
    EXPECT_TRUE(inference.masks.empty());
    inference.weights = tr.weights;
    expect_near(time_major(run(inference, x, 1).first, s), plain, "inference");
  }
}

TEST(ConvLSTM2DDropout, MasksKeepTheRateDifferPerGateAndPerStep) {
  const Sizes s{8, 2, 8, 8, 4, 4};
  const double rate = 0.3;
  Traced tr;
  trace(tr, s, /*training=*/true, rate, rate);
  ASSERT_EQ(tr.masks.size(), 8u);
  const Tensor x = testing::random_tensor({s.B, s.T, s.R, s.C, s.K}, 6);
  const std::vector<Tensor> first = run(tr, x, 1).second, second = run(tr, x, 2).second;
  const float kept = static_cast<float>(1.0 / (1.0 - rate));
  int64_t zeros = 0, total = 0;
  for (const Tensor& m : first)
    for (float v : m.to_vector()) {
      ASSERT_TRUE(v == 0.0f || v == kept) << v;
      zeros += v == 0.0f;
      ++total;
    }
  EXPECT_NEAR(double(zeros) / double(total), rate, 0.02);
  // Independent masks disagree on 2 p (1 - p) = 0.42 of their elements:
  // between the gates, between input and recurrent draws of one gate, and
  // between two training steps.
  auto disagree = [](const Tensor& a, const Tensor& b) {
    int64_t n = 0;
    for (int64_t i = 0; i < a.numel(); ++i) n += (a.f32()[i] == 0) != (b.f32()[i] == 0);
    return double(n) / double(a.numel());
  };
  const double independent = 2 * rate * (1 - rate);
  for (int k = 0; k < 4; ++k) {
    EXPECT_NEAR(disagree(first[k], first[(k + 1) % 4]), independent, 0.05) << "input gate " << k;
    EXPECT_NEAR(disagree(first[4 + k], first[4 + (k + 1) % 4]), independent, 0.05)
        << "recurrent gate " << k;
    EXPECT_NEAR(disagree(first[k], second[k]), independent, 0.05) << "steps, gate " << k;
  }
  // The input and recurrent masks of this size have the same shape here.
  EXPECT_NEAR(disagree(first[0], first[4]), independent, 0.05);
}

TEST(ConvLSTM2DDropout, RatesOutsideTheRangeAreRefused) {
  EXPECT_THROW(ConvLSTM2D(2, {3}, ConvLSTM2DOptions().dropout(1.0)), Error);
  EXPECT_THROW(ConvLSTM2D(2, {3}, ConvLSTM2DOptions().recurrent_dropout(-0.1)), Error);
}

}  // namespace autoshard::conv_lstm_dropout_test
