// LSTM, GRU, SimpleRNN and Bidirectional against a plain reference written
// here (loops over time in double precision from the same weights, Keras's
// equations): outputs and final states, gradients against the reference's
// central differences, sharded training on several meshes against one
// device, and a small LSTM that learns to remember.
#include "autoshard/nn/recurrent_layers.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "test_util.h"

namespace autoshard {
namespace {

using Vec = std::vector<double>;

// ---- the reference ----

enum class Kind { SimpleRNN, LSTM, GRU };

struct RefCell {
  Kind kind = Kind::LSTM;
  int64_t units = 0;
  bool reset_after = true;
  bool go_backwards = false;
  bool return_sequences = false;
  Vec kernel, recurrent, bias;  // [in, G U], [U, G U], [G U] or [2, G U] or empty
  int gates() const { return kind == Kind::LSTM ? 4 : kind == Kind::GRU ? 3 : 1; }
};

double sigmoid(double x) {
  return 1 / (1 + std::exp(-x));
}

struct RefOut {
  Vec output;  // [B, T, U] in processed order, or [B, U]
  Vec h, c;    // [B, U]
};

// Keras's equations, one example and one step at a time.
RefOut reference(const RefCell& cell, const Vec& x, int64_t B, int64_t T, int64_t in,
                 const Vec& h0 = {}, const Vec& c0 = {}) {
  const int64_t U = cell.units, G = cell.gates(), W = G * U;
  RefOut r;
  r.h = h0.empty() ? Vec(B * U, 0.0) : h0;
  r.c = c0.empty() ? Vec(B * U, 0.0) : c0;
  if (cell.return_sequences) r.output.assign(B * T * U, 0.0);
  auto bias = [&](int row, int64_t j) {
    if (cell.bias.empty()) return 0.0;
    return cell.bias[row * W + j];
  };
  for (int64_t b = 0; b < B; ++b) {
    double* h = &r.h[b * U];
    double* c = &r.c[b * U];
    for (int64_t s = 0; s < T; ++s) {
      const int64_t t = cell.go_backwards ? T - 1 - s : s;
      Vec xz(W, 0.0), hz(W, 0.0);  // x W (+ input bias), h U (+ recurrent bias)
      for (int64_t j = 0; j < W; ++j) {
        for (int64_t k = 0; k < in; ++k) xz[j] += x[(b * T + t) * in + k] * cell.kernel[k * W + j];
        for (int64_t u = 0; u < U; ++u) hz[j] += h[u] * cell.recurrent[u * W + j];
        const bool separate = cell.kind == Kind::GRU && cell.reset_after;
        xz[j] += bias(0, j);
        if (separate) hz[j] += bias(1, j);
      }
      Vec nh(U);
      for (int64_t u = 0; u < U; ++u) {
        if (cell.kind == Kind::SimpleRNN) {
          nh[u] = std::tanh(xz[u] + hz[u]);
        } else if (cell.kind == Kind::LSTM) {
          const double i = sigmoid(xz[u] + hz[u]), f = sigmoid(xz[U + u] + hz[U + u]);
          const double g = std::tanh(xz[2 * U + u] + hz[2 * U + u]);
          const double o = sigmoid(xz[3 * U + u] + hz[3 * U + u]);
          c[u] = f * c[u] + i * g;
          nh[u] = o * std::tanh(c[u]);
        } else {
          const double z = sigmoid(xz[u] + hz[u]), rr = sigmoid(xz[U + u] + hz[U + u]);
          double rec;
          if (cell.reset_after) {
            rec = rr * hz[2 * U + u];
          } else {
            rec = 0;
            for (int64_t v = 0; v < U; ++v) {
              const double rv = sigmoid(xz[U + v] + hz[U + v]);
              rec += rv * h[v] * cell.recurrent[v * W + 2 * U + u];
            }
          }
          const double hh = std::tanh(xz[2 * U + u] + rec);
          nh[u] = z * h[u] + (1 - z) * hh;
        }
      }
      std::copy(nh.begin(), nh.end(), h);
      if (cell.return_sequences)
        std::copy(nh.begin(), nh.end(), r.output.begin() + (b * T + s) * U);
    }
  }
  if (!cell.return_sequences) r.output = r.h;
  return r;
}

// The time axis of [B, T, U] reversed.
Vec reverse_time(const Vec& y, int64_t B, int64_t T, int64_t U) {
  Vec out(y.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t u = 0; u < U; ++u) out[(b * T + t) * U + u] = y[(b * T + (T - 1 - t)) * U + u];
  return out;
}

Vec to_vec(const Tensor& t) {
  return Vec(t.f32(), t.f32() + t.numel());
}

// The largest difference relative to the largest magnitude of `want`.
double relative_error(const Vec& got, const Vec& want) {
  EXPECT_EQ(got.size(), want.size());
  double scale = 0, diff = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    diff = std::max(diff, std::fabs(got[i] - want[i]));
  }
  return diff / (scale > 0 ? scale : 1);
}

// ---- the layer, traced ----

using LayerFn = std::function<std::vector<Value>(Trace&, Value)>;

struct TracedRnn {
  Graph graph;
  Value x;
  std::vector<Value> outputs;
  std::map<std::string, Tensor> weights;  // random, by path
};

// Traces `f` on an input [B, T, in] and draws every weight it declares.
void trace(TracedRnn& tr, const LayerFn& f, Shape x_shape, bool training = false) {
  Trace t(tr.graph, training, 0);
  tr.x = tr.graph.input("x", x_shape);
  tr.outputs = f(t, tr.x);
  uint64_t seed = 100;
  for (int id : tr.graph.parameters()) {
    const Node& n = tr.graph.node(id);
    tr.weights[n.leaf().key()] = testing::random_tensor(n.shape, seed++, 0.5f);
  }
}

RefCell ref_cell(Kind kind, int64_t units, const std::map<std::string, Tensor>& w,
                 const std::string& prefix) {
  RefCell c;
  c.kind = kind;
  c.units = units;
  c.kernel = to_vec(w.at(prefix + ".kernel"));
  c.recurrent = to_vec(w.at(prefix + ".recurrent_kernel"));
  if (w.count(prefix + ".bias")) c.bias = to_vec(w.at(prefix + ".bias"));
  return c;
}

std::vector<Vec> run(const TracedRnn& tr, const Tensor& x) {
  std::map<std::string, Tensor> leaves = tr.weights;
  leaves["x"] = x;
  std::vector<int> ids;
  for (Value v : tr.outputs) ids.push_back(v.id);
  std::vector<Vec> out;
  for (const Tensor& t : testing::evaluate(tr.graph, leaves, ids)) out.push_back(to_vec(t));
  return out;
}

constexpr int64_t kB = 3, kT = 5, kFeatures = 3, kU = 5;  // odd sizes on purpose

struct CellCase {
  const char* name;
  Kind kind;
  bool reset_after;
  std::function<RecurrentLayer(bool sequences, bool backwards)> make;
};

std::vector<CellCase> cell_cases() {
  return {
      {"lstm", Kind::LSTM, true,
       [](bool seq, bool back) {
         return LSTM(
             kU,
             LSTMOptions().name("rnn").return_sequences(seq).return_state(true).go_backwards(back));
       }},
      {"gru", Kind::GRU, true,
       [](bool seq, bool back) {
         return GRU(
             kU,
             GRUOptions().name("rnn").return_sequences(seq).return_state(true).go_backwards(back));
       }},
      {"gru_reset_before", Kind::GRU, false,
       [](bool seq, bool back) {
         return GRU(kU, GRUOptions()
                            .name("rnn")
                            .reset_after(false)
                            .return_sequences(seq)
                            .return_state(true)
                            .go_backwards(back));
       }},
      {"simple_rnn", Kind::SimpleRNN, true,
       [](bool seq, bool back) {
         return SimpleRNN(
             kU,
             SimpleRNNOptions().name("rnn").return_sequences(seq).return_state(true).go_backwards(
                 back));
       }},
  };
}

TEST(RecurrentLayers, OutputsAndStatesMatchTheReference) {
  const Tensor x = testing::random_tensor({kB, kT, kFeatures}, 7);
  for (const CellCase& cc : cell_cases()) {
    for (bool seq : {false, true}) {
      for (bool back : {false, true}) {
        SCOPED_TRACE(std::string(cc.name) + (seq ? " sequences" : " last") +
                     (back ? " backwards" : ""));
        RecurrentLayer layer = cc.make(seq, back);
        TracedRnn tr;
        trace(tr, [&](Trace& t, Value v) { return layer.call_with_states(t, v); },
              {kB, kT, kFeatures});
        RefCell ref = ref_cell(cc.kind, kU, tr.weights, "rnn");
        ref.reset_after = cc.reset_after;
        ref.go_backwards = back;
        ref.return_sequences = seq;
        RefOut want = reference(ref, to_vec(x), kB, kT, kFeatures);
        std::vector<Vec> got = run(tr, x);
        ASSERT_EQ(got.size(), cc.kind == Kind::LSTM ? 3u : 2u);
        EXPECT_LT(relative_error(got[0], want.output), 1e-5);
        EXPECT_LT(relative_error(got[1], want.h), 1e-5);
        if (cc.kind == Kind::LSTM) {
          EXPECT_LT(relative_error(got[2], want.c), 1e-5);
        }
      }
    }
  }
}

// Keras's default LSTM and GRU run each step as one fused cell op; other
// activations, and a GRU without reset_after, stay composed (the reference
// tests above pass either way, so this is what says which one runs).
TEST(RecurrentLayers, DefaultCellsRunFusedOps) {
  auto count = [](const RecurrentLayer& layer, Op op) {
    TracedRnn tr;
    trace(tr, [&](Trace& t, Value x) { return layer.call_with_states(t, x, {}); },
          {kB, kT, kFeatures});
    int n = 0;
    for (int i = 0; i < tr.graph.size(); ++i) n += tr.graph.node(i).op == op;
    return n;
  };
  EXPECT_EQ(count(LSTM(kU), Op::LstmCell), kT);
  EXPECT_EQ(count(GRU(kU), Op::GruCell), kT);
  EXPECT_EQ(count(GRU(kU, GRUOptions().reset_after(false)), Op::GruCell), 0);
  EXPECT_EQ(count(GRU(kU, GRUOptions().recurrent_activation("hard_sigmoid")), Op::GruCell), 0);
  EXPECT_EQ(count(LSTM(kU, LSTMOptions().activation("relu")), Op::LstmCell), 0);
}

TEST(RecurrentLayers, WeightsHaveKerasNamesAndShapes) {
  auto shapes = [](const LayerFn& f) {
    TracedRnn tr;
    trace(tr, f, {2, 4, 3});
    std::map<std::string, Shape> s;
    for (const auto& [k, w] : tr.weights) s[k] = w.shape();
    return s;
  };
  LSTM lstm(5, LSTMOptions().name("lstm"));
  EXPECT_EQ(
      shapes([&](Trace& t, Value x) { return std::vector{lstm(t, x)}; }),
      (std::map<std::string, Shape>{
          {"lstm.kernel", {3, 20}}, {"lstm.recurrent_kernel", {5, 20}}, {"lstm.bias", {20}}}));
  GRU gru(5, GRUOptions().name("gru"));
  EXPECT_EQ(
      shapes([&](Trace& t, Value x) { return std::vector{gru(t, x)}; }),
      (std::map<std::string, Shape>{
          {"gru.kernel", {3, 15}}, {"gru.recurrent_kernel", {5, 15}}, {"gru.bias", {2, 15}}}));
  GRU gru_before(5, GRUOptions().name("gru").reset_after(false));
  EXPECT_EQ(shapes([&](Trace& t, Value x) { return std::vector{gru_before(t, x)}; })["gru.bias"],
            (Shape{15}));
  SimpleRNN rnn(5, SimpleRNNOptions().name("simple_rnn").use_bias(false));
  EXPECT_EQ(shapes([&](Trace& t, Value x) { return std::vector{rnn(t, x)}; }),
            (std::map<std::string, Shape>{{"simple_rnn.kernel", {3, 5}},
                                          {"simple_rnn.recurrent_kernel", {5, 5}}}));
  Bidirectional bi(LSTM(4, LSTMOptions().name("lstm")),
                   BidirectionalOptions().name("bidirectional"));
  auto s = shapes([&](Trace& t, Value x) { return std::vector{bi(t, x)}; });
  EXPECT_EQ(s.size(), 6u);
  EXPECT_EQ(s.at("bidirectional.forward_lstm.kernel"), (Shape{3, 16}));
  EXPECT_EQ(s.at("bidirectional.backward_lstm.recurrent_kernel"), (Shape{4, 16}));
}

TEST(RecurrentLayers, InitialStatesAreUsed) {
  const Tensor x = testing::random_tensor({kB, kT, kFeatures}, 8);
  const Tensor h0 = testing::random_tensor({kB, kU}, 9), c0 = testing::random_tensor({kB, kU}, 10);
  LSTM lstm(kU, LSTMOptions().name("rnn").return_state(true));
  TracedRnn tr;
  Value h0v, c0v;
  trace(tr,
        [&](Trace& t, Value v) {
          h0v = t.graph().input("h0", {kB, kU});
          c0v = t.graph().input("c0", {kB, kU});
          return lstm.call_with_states(t, v, {h0v, c0v});
        },
        {kB, kT, kFeatures});
  tr.weights["h0"] = h0;
  tr.weights["c0"] = c0;
  RefCell ref = ref_cell(Kind::LSTM, kU, tr.weights, "rnn");
  RefOut want = reference(ref, to_vec(x), kB, kT, kFeatures, to_vec(h0), to_vec(c0));
  std::vector<Vec> got = run(tr, x);
  EXPECT_LT(relative_error(got[0], want.output), 1e-5);
  EXPECT_LT(relative_error(got[2], want.c), 1e-5);
}

// Keras's masks (Trace::mask): a masked step keeps the states, so each row
// of a right-padded batch ends where its own sequence alone ends, both
// ways (go_backwards starts at the padding and keeps its zero state).
TEST(RecurrentLayers, MaskedStepsKeepTheStates) {
  const Tensor x = testing::random_tensor({kB, kT, kFeatures}, 12);
  const int64_t lengths[kB] = {kT, 2, 3};
  Tensor mask({kB, kT}, DType::F32);
  for (int64_t b = 0; b < kB; ++b)
    for (int64_t s = 0; s < kT; ++s) mask.f32()[b * kT + s] = s < lengths[b] ? 1.0f : 0.0f;
  const Vec xs = to_vec(x);
  for (const CellCase& cc : cell_cases()) {
    for (bool back : {false, true}) {
      SCOPED_TRACE(std::string(cc.name) + (back ? " backwards" : ""));
      RecurrentLayer layer = cc.make(false, back);
      TracedRnn tr;
      trace(tr,
            [&](Trace& t, Value v) {
              t.set_mask(v, t.graph().input("mask", {kB, kT}));
              return layer.call_with_states(t, v);
            },
            {kB, kT, kFeatures});
      tr.weights["mask"] = mask;
      RefCell ref = ref_cell(cc.kind, kU, tr.weights, "rnn");
      ref.reset_after = cc.reset_after;
      ref.go_backwards = back;
      const std::vector<Vec> got = run(tr, x);
      for (int64_t b = 0; b < kB; ++b) {
        const int64_t n = lengths[b];
        Vec row;
        for (int64_t s = 0; s < n; ++s)
          row.insert(row.end(), xs.begin() + (b * kT + s) * kFeatures,
                     xs.begin() + (b * kT + s + 1) * kFeatures);
        const RefOut want = reference(ref, row, 1, n, kFeatures);
        const Vec h(got[1].begin() + b * kU, got[1].begin() + (b + 1) * kU);
        const Vec last(got[0].begin() + b * kU, got[0].begin() + (b + 1) * kU);
        EXPECT_LT(relative_error(h, want.h), 1e-5) << "row " << b;
        EXPECT_LT(relative_error(last, want.h), 1e-5) << "row " << b;
      }
    }
  }
}

TEST(RecurrentLayers, BidirectionalMergesInTimeOrder) {
  const Tensor x = testing::random_tensor({kB, kT, kFeatures}, 11);
  for (const char* mode : {"concat", "sum", "mul", "ave"}) {
    for (bool seq : {false, true}) {
      SCOPED_TRACE(std::string(mode) + (seq ? " sequences" : " last"));
      Bidirectional bi(GRU(kU, GRUOptions().name("gru").return_sequences(seq).return_state(true)),
                       BidirectionalOptions().name("bi").merge_mode(mode));
      TracedRnn tr;
      trace(tr, [&](Trace& t, Value v) { return bi.call_with_states(t, v); }, {kB, kT, kFeatures});
      ASSERT_EQ(tr.outputs.size(), 3u);  // merged output, forward h, backward h
      RefCell f = ref_cell(Kind::GRU, kU, tr.weights, "bi.forward_gru");
      RefCell b = ref_cell(Kind::GRU, kU, tr.weights, "bi.backward_gru");
      f.return_sequences = b.return_sequences = seq;
      b.go_backwards = true;
      RefOut yf = reference(f, to_vec(x), kB, kT, kFeatures),
             yb = reference(b, to_vec(x), kB, kT, kFeatures);
      Vec rb = seq ? reverse_time(yb.output, kB, kT, kU) : yb.output;
      const int64_t rows = seq ? kB * kT : kB;
      Vec want;
      for (int64_t r = 0; r < rows; ++r) {
        if (std::string(mode) == "concat") {
          want.insert(want.end(), yf.output.begin() + r * kU, yf.output.begin() + (r + 1) * kU);
          want.insert(want.end(), rb.begin() + r * kU, rb.begin() + (r + 1) * kU);
          continue;
        }
        for (int64_t u = 0; u < kU; ++u) {
          const double a = yf.output[r * kU + u], c = rb[r * kU + u];
          const std::string m = mode;
          want.push_back(m == "sum" ? a + c : m == "mul" ? a * c : (a + c) / 2);
        }
      }
      std::vector<Vec> got = run(tr, x);
      EXPECT_LT(relative_error(got[0], want), 1e-5);
      EXPECT_LT(relative_error(got[1], yf.h), 1e-5);
      EXPECT_LT(relative_error(got[2], yb.h), 1e-5);
    }
  }
}

// ---- gradients ----

// loss = sum over outputs of <output, r_k> for fixed random r_k; returns the
// traced gradients of every weight and of x, by key ("x" for the input).
std::map<std::string, Vec> traced_gradients(const LayerFn& f, const Tensor& x,
                                            std::map<std::string, Tensor>& weights,
                                            std::vector<Tensor>& rs) {
  TracedRnn tr;
  trace(tr, f, x.shape());
  weights = tr.weights;
  Graph& g = tr.graph;
  Value loss;
  for (size_t k = 0; k < tr.outputs.size(); ++k) {
    Value out = tr.outputs[k];
    rs.push_back(testing::random_tensor(out.shape(), 300 + k));
    tr.weights["r" + std::to_string(k)] = rs.back();
    Value r = g.input("r" + std::to_string(k), out.shape());
    std::vector<int64_t> axes;
    for (int d = 0; d < out.rank(); ++d) axes.push_back(d);
    Value term = ops::reduce_sum(out * r, axes);
    loss = loss.valid() ? loss + term : term;
  }
  std::vector<Value> wrt{tr.x};
  std::vector<std::string> keys{"x"};
  for (int id : g.parameters()) {
    wrt.push_back(g.value(id));
    keys.push_back(g.node(id).leaf().key());
  }
  std::vector<Value> grads = gradients(loss, wrt);
  tr.outputs = grads;
  std::vector<Vec> got = run(tr, x);
  std::map<std::string, Vec> out;
  for (size_t i = 0; i < keys.size(); ++i) out[keys[i]] = got[i];
  return out;
}

double dot(const Vec& a, const Tensor& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b.f32()[i];
  return s;
}

TEST(RecurrentLayers, GradientsMatchCentralDifferences) {
  const int64_t B = 2, T = 4, in = 3, U = 3;
  const Tensor x = testing::random_tensor({B, T, in}, 12);
  for (const CellCase& cc : cell_cases()) {
    for (bool back : {false, true}) {
      SCOPED_TRACE(std::string(cc.name) + (back ? " backwards" : ""));
      RecurrentLayer layer = [&]() -> RecurrentLayer {
        if (cc.kind == Kind::LSTM)
          return LSTM(
              U, LSTMOptions().name("rnn").return_sequences(true).return_state(true).go_backwards(
                     back));
        if (cc.kind == Kind::GRU)
          return GRU(U, GRUOptions()
                            .name("rnn")
                            .reset_after(cc.reset_after)
                            .return_sequences(true)
                            .return_state(true)
                            .go_backwards(back));
        return SimpleRNN(
            U,
            SimpleRNNOptions().name("rnn").return_sequences(true).return_state(true).go_backwards(
                back));
      }();
      std::map<std::string, Tensor> w;
      std::vector<Tensor> rs;
      auto got = traced_gradients([&](Trace& t, Value v) { return layer.call_with_states(t, v); },
                                  x, w, rs);
      // The reference's loss as a function of every weight and x, in double.
      RefCell base = ref_cell(cc.kind, U, w, "rnn");
      base.reset_after = cc.reset_after;
      base.go_backwards = back;
      base.return_sequences = true;
      Vec xv = to_vec(x);
      auto loss = [&](const RefCell& cell, const Vec& xs) {
        RefOut o = reference(cell, xs, B, T, in);
        double l = dot(o.output, rs[0]) + dot(o.h, rs[1]);
        if (cc.kind == Kind::LSTM) l += dot(o.c, rs[2]);
        return l;
      };
      const double eps = 1e-6;
      auto central = [&](Vec& v, const std::function<double()>& f) {
        Vec d(v.size());
        for (size_t i = 0; i < v.size(); ++i) {
          const double keep = v[i];
          v[i] = keep + eps;
          const double up = f();
          v[i] = keep - eps;
          d[i] = (up - f()) / (2 * eps);
          v[i] = keep;
        }
        return d;
      };
      RefCell cell = base;
      EXPECT_LT(relative_error(got.at("x"), central(xv, [&] { return loss(cell, xv); })), 1e-4);
      xv = to_vec(x);
      EXPECT_LT(relative_error(got.at("rnn.kernel"),
                               central(cell.kernel, [&] { return loss(cell, xv); })),
                1e-4);
      EXPECT_LT(relative_error(got.at("rnn.recurrent_kernel"),
                               central(cell.recurrent, [&] { return loss(cell, xv); })),
                1e-4);
      EXPECT_LT(
          relative_error(got.at("rnn.bias"), central(cell.bias, [&] { return loss(cell, xv); })),
          1e-4);
    }
  }
}

// ---- sharded training ----

struct TrainResult {
  std::vector<double> losses;
  std::map<std::string, Tensor> weights;
};

// A stacked recurrent model with awkward sizes: 7 and 5 units (divisible by
// none of the meshes), a bidirectional layer, a backwards GRU.
TrainResult train_stack(std::shared_ptr<Distribution> dist) {
  const int64_t B = 6, T = 5, F = 3;
  auto in = Input({T, F});
  Sequential model(
      in, {Bidirectional(LSTM(7, LSTMOptions().name("lstm").return_sequences(true)),
                         BidirectionalOptions().name("bi")),
           GRU(5, GRUOptions().name("gru").return_sequences(true).go_backwards(true)),
           SimpleRNN(4, SimpleRNNOptions().name("rnn")), Dense(3, DenseOptions().name("out"))});
  model.set_seed(5);
  if (dist) model.set_distribution(dist);
  model.compile(Adam({.learning_rate = 1e-2, .epsilon = 1e-3}), losses::mean_squared_error);
  TrainResult r;
  for (int s = 0; s < 3; ++s)
    r.losses.push_back(model.train_on_batch(testing::random_tensor({B, T, F}, 20 + s),
                                            testing::random_tensor({B, 3}, 40 + s)));
  for (const std::string& p : model.weight_paths()) r.weights[p] = model.gather_weight(p);
  return r;
}

void expect_same(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < want.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-4 * want.losses[i]) << "step " << i + 1;
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (const auto& [path, w] : want.weights)
    EXPECT_LT(max_relative_error(got.weights.at(path), w), 1e-4) << path;
}

TEST(RecurrentLayers, AutoShardOnMeshesMatchesOneDevice) {
  const TrainResult want = train_stack(nullptr);
  for (auto [shape, names] : std::vector<std::pair<std::vector<int>, std::vector<std::string>>>{
           {{3}, {"model"}}, {{4}, {"model"}}, {{2, 2}, {"data", "model"}}}) {
    DeviceMesh mesh(shape, names);
    SCOPED_TRACE(mesh.to_string());
    expect_same(train_stack(std::make_shared<AutoShard>(mesh, "data",
                                                        AutoShardOptions{.time_limit_s = 0.2})),
                want);
  }
}

// Hand layouts: the batch split, and every kernel's gate columns split over
// a model axis of 3 (blocks that straddle gates) with the batch over 2.
TEST(RecurrentLayers, HandLayoutsMatchOneDevice) {
  const TrainResult want = train_stack(nullptr);
  expect_same(train_stack(std::make_shared<DataParallel>(DeviceMesh({2}, {"data"}))), want);
  LayoutMap map;
  map["kernel$"] = {std::nullopt, "model"};  // kernels and recurrent kernels: columns
  map["(lstm|rnn|out)\\.bias$"] = {"model"};
  map["gru\\.bias$"] = {std::nullopt, "model"};
  for (auto [shape, names] : std::vector<std::pair<std::vector<int>, std::vector<std::string>>>{
           {{3}, {"model"}}, {{2, 2}, {"data", "model"}}, {{2, 3}, {"data", "model"}}}) {
    DeviceMesh mesh(shape, names);
    SCOPED_TRACE(mesh.to_string());
    expect_same(train_stack(std::make_shared<ModelParallel>(mesh, map)), want);
  }
}

// Split units exchange the state every step; a split batch never does.
TEST(RecurrentLayers, SplitUnitsGatherTheStateEveryStep) {
  const int64_t T = 10;
  auto collectives = [&](std::shared_ptr<Distribution> dist) {
    auto in = Input({T, 3});
    Sequential model(in,
                     {LSTM(7, LSTMOptions().name("lstm")), Dense(2, DenseOptions().name("out"))});
    model.set_distribution(dist);
    model.compile(SGD(), losses::mean_squared_error);
    return model.plan_training({6, T, 3}, {6, 2}, DType::F32).collectives.size();
  };
  LayoutMap map;
  map["lstm\\..*kernel$"] = {std::nullopt, "model"};
  EXPECT_GE(collectives(std::make_shared<ModelParallel>(DeviceMesh({3}, {"model"}), map)),
            static_cast<size_t>(2 * T));  // forward and backward
  EXPECT_LT(collectives(std::make_shared<DataParallel>(DeviceMesh({3}, {"data"}))),
            static_cast<size_t>(8));  // five gradients' all-reduces and the loss's
}

// ---- learning ----

// Remember the first of five inputs: needs the cell state across time.
TEST(RecurrentLayers, LstmLearnsToRemember) {
  const int64_t N = 64, T = 5;
  Tensor x = testing::random_tensor({N, T, 1}, 30), y({N, 1});
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t t = 0; t < T; ++t) x.f32()[n * T + t] = x.f32()[n * T + t] > 0 ? 1.0f : -1.0f;
    y.f32()[n] = x.f32()[n * T];
  }
  auto in = Input({T, 1});
  Sequential model(in, {LSTM(8, LSTMOptions().name("lstm")), Dense(1, DenseOptions().name("out"))});
  model.compile(Adam({.learning_rate = 0.03}), losses::mean_squared_error);
  History h = model.fit(x, y, {.batch_size = 16, .epochs = 40, .verbose = false});
  EXPECT_GT(h.loss.front(), 0.5);
  EXPECT_LT(h.loss.back(), 0.05);
}

// ---- bad input ----

TEST(RecurrentLayers, BadOptionsAndInputsAreClearErrors) {
  EXPECT_THROW(LSTM(0), Error);
  EXPECT_THROW(GRU(3, GRUOptions().activation("nope")), Error);
  EXPECT_THROW(LSTM(3, LSTMOptions().dropout(1.0)), Error);
  EXPECT_THROW(Bidirectional(LSTM(3), BidirectionalOptions().merge_mode("max")), Error);
  EXPECT_THROW(Bidirectional(LSTM(3), LSTM(3)), Error);  // both forwards
  Graph g;
  Trace t(g, false, 0);
  LSTM lstm(3);
  EXPECT_THROW(lstm(t, g.input("flat", {2, 4})), Error);
  Value x = g.input("x", {2, 4, 3});
  EXPECT_THROW(lstm.call_with_states(t, x, {g.input("h", {2, 3})}), Error);  // h without c
  EXPECT_THROW(lstm.call_with_states(t, x, {g.input("h2", {2, 4}), g.input("c2", {2, 4})}), Error);
  // merge_mode none: a layer of two outputs (operator() gives the first).
  Bidirectional none(GRU(3), BidirectionalOptions().merge_mode("none"));
  EXPECT_EQ(none.output_count(), 2);
  EXPECT_EQ(none.outputs(t, {x}).size(), 2u);
  EXPECT_EQ(none.call_with_states(t, x).size(), 2u);
}

}  // namespace
}  // namespace autoshard
