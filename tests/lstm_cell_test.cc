// The fused LSTM step (ops::lstm_cell, src/ir/ops/recurrent.cc) against the
// same step composed of the plain ops (crops, sigmoid, tanh, products and
// sums, as nn/recurrent_layers.cc composes it for other activations):
// outputs and the gradients of every input, over a few chained steps so
// that the state's gradient flows through the cell, at odd sizes, with and
// without a mask (masked rows carry the state over). The fused GRU step
// (ops::gru_cell) against its composed step the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <numeric>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::evaluate;
using testing::random_tensor;

// Rows [begin, begin + n) of x along `axis`.
Value take_rows(Value x, int axis, int64_t begin, int64_t n) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0);
  lo[axis] = -begin;
  hi[axis] = -(x.dim(axis) - begin - n);
  return ops::pad(x, lo, hi);
}

// The composed step: z [B, 4, U] = x + r, state [2, B, U].
Value composed_cell(Value x, Value r, Value state, Value mask) {
  const int64_t B = x.dim(0), U = x.dim(2);
  const Value z = x + r;
  auto gate = [&](int k) { return ops::reshape(take_rows(z, 1, k, 1), {B, U}); };
  const Value h = ops::reshape(take_rows(state, 0, 0, 1), {B, U});
  const Value c = ops::reshape(take_rows(state, 0, 1, 1), {B, U});
  const Value i = ops::sigmoid(gate(0)), f = ops::sigmoid(gate(1));
  Value c_new = f * c + i * ops::tanh(gate(2));
  Value h_new = ops::sigmoid(gate(3)) * ops::tanh(c_new);
  if (mask.valid()) {
    h_new = h + mask * (h_new - h);
    c_new = c + mask * (c_new - c);
  }
  const Shape one{1, B, U};
  std::vector<int64_t> zero{0, 0, 0}, after{1, 0, 0}, before{1, 0, 0};
  return ops::pad(ops::reshape(h_new, one), zero, after) +
         ops::pad(ops::reshape(c_new, one), before, zero);
}

struct FusedCellCase {
  int64_t batch, units;
  bool masked;
};

// A cell under test: the rows of its x and r, its state's shape for a
// batch and units, and one step.
struct Cell {
  int64_t rows;
  std::function<Shape(int64_t batch, int64_t units)> state;
  std::function<Value(Value x, Value r, Value state, Value mask)> step;
};

// Three chained steps of `cell` from the same leaves; the loss weighs every
// step's state, and its gradients go to every leaf the cells read.
std::vector<Tensor> run_steps(const FusedCellCase& k, const Cell& cell) {
  constexpr int kSteps = 3;
  const int64_t B = k.batch, U = k.units;
  const Shape state_shape = cell.state(B, U);
  std::vector<int64_t> every_axis(state_shape.size());
  std::iota(every_axis.begin(), every_axis.end(), 0);
  Graph g;
  std::map<std::string, Tensor> leaves;
  auto leaf = [&](const std::string& name, Shape s, uint64_t seed, float scale) {
    leaves[name] = random_tensor(s, seed, scale);
    return g.parameter(name, s);
  };
  Value state = leaf("state", state_shape, 7, 0.8f);
  std::vector<Value> params{state};
  Value loss;
  for (int s = 0; s < kSteps; ++s) {
    // Rows alternate between stepping and keeping their state, and each
    // row alternates from step to step.
    Value mask;
    if (k.masked) {
      Tensor m({B, 1});
      for (int64_t b = 0; b < B; ++b) m.f32()[b] = (b + s) % 2 == 0 ? 1.0f : 0.0f;
      const std::string name = "mask" + std::to_string(s);
      leaves[name] = m;
      mask = g.parameter(name, {B, 1});
    }
    const Value x = leaf("x" + std::to_string(s), {B, cell.rows, U}, 10 + s, 1.5f);
    const Value r = leaf("r" + std::to_string(s), {B, cell.rows, U}, 20 + s, 1.5f);
    params.push_back(x);
    params.push_back(r);
    state = cell.step(x, r, state, mask);
    const Value w = leaf("w" + std::to_string(s), state_shape, 30 + s, 1.0f);
    const Value term = ops::reduce_sum(state * w, every_axis);
    loss = s == 0 ? term : loss + term;
  }
  std::vector<int> outs{state.id, loss.id};
  for (Value d : gradients(loss, params)) outs.push_back(d.id);
  return evaluate(g, leaves, outs);
}

// The fused cell's values and gradients against the composed cell's, at odd
// sizes, with and without masks.
void expect_fused_matches_composed(const Cell& fused, const Cell& composed) {
  for (const FusedCellCase& k :
       {FusedCellCase{3, 5, false}, FusedCellCase{3, 5, true}, FusedCellCase{1, 7, false},
        FusedCellCase{4, 33, true}, FusedCellCase{5, 1, true}}) {
    const std::vector<Tensor> got = run_steps(k, fused), want = run_steps(k, composed);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LT(max_relative_error(got[i], want[i]), 1e-5)
          << "batch " << k.batch << ", units " << k.units << (k.masked ? ", masked" : "")
          << ": value " << i << " (0 the last state, 1 the loss, then the gradients)";
  }
}

Shape lstm_state(int64_t batch, int64_t units) {
  return {2, batch, units};
}

TEST(LstmCell, FusedMatchesTheComposedOps) {
  expect_fused_matches_composed({4, lstm_state, ops::lstm_cell}, {4, lstm_state, composed_cell});
}

// A masked row keeps its state exactly, and its state's gradient passes
// through untouched.
TEST(LstmCell, MaskedRowsCarryTheStateOver) {
  Graph g;
  const int64_t B = 2, U = 3;
  Value x = g.parameter("x", {B, 4, U}), r = g.parameter("r", {B, 4, U});
  Value state = g.parameter("state", {2, B, U}), mask = g.parameter("mask", {B, 1});
  Value next = ops::lstm_cell(x, r, state, mask);
  Value loss = ops::reduce_sum(next, {0, 1, 2});
  std::vector<Value> d = gradients(loss, {state, x});
  Tensor m({B, 1});
  m.f32()[0] = 0.0f;
  m.f32()[1] = 1.0f;
  std::map<std::string, Tensor> leaves{{"x", random_tensor({B, 4, U}, 1)},
                                       {"r", random_tensor({B, 4, U}, 2)},
                                       {"state", random_tensor({2, B, U}, 3)},
                                       {"mask", m}};
  std::vector<Tensor> out = evaluate(g, leaves, {next.id, d[0].id, d[1].id});
  const Tensor& s = leaves["state"];
  for (int64_t part = 0; part < 2; ++part)
    for (int64_t u = 0; u < U; ++u) {
      const int64_t at = part * B * U + u;  // row 0 of h, then of c
      EXPECT_EQ(out[0].f32()[at], s.f32()[at]);
      EXPECT_EQ(out[1].f32()[at], 1.0f);
    }
  for (int64_t e = 0; e < 4 * U; ++e) EXPECT_EQ(out[2].f32()[e], 0.0f);  // row 0's gates
}

// The composed GRU step (reset_after), as nn/recurrent_layers.cc composes
// it for other activations: x, r [B, 3, U] (rows z, r, h), h [B, U].
Value composed_gru_cell(Value x, Value r, Value h, Value mask) {
  const int64_t B = x.dim(0), U = x.dim(2);
  auto row = [&](Value v, int k) { return ops::reshape(take_rows(v, 1, k, 1), {B, U}); };
  const Value z = ops::sigmoid(row(x, 0) + row(r, 0));
  const Value reset = ops::sigmoid(row(x, 1) + row(r, 1));
  const Value cand = ops::tanh(row(x, 2) + reset * row(r, 2));
  const Value h_new = cand + z * (h - cand);
  return mask.valid() ? h + mask * (h_new - h) : h_new;
}

Shape gru_state(int64_t batch, int64_t units) {
  return {batch, units};
}

TEST(GruCell, FusedMatchesTheComposedOps) {
  expect_fused_matches_composed({3, gru_state, ops::gru_cell}, {3, gru_state, composed_gru_cell});
}

// A masked row keeps its h exactly, and h's gradient passes through it
// untouched while x and r get none.
TEST(GruCell, MaskedRowsCarryTheStateOver) {
  Graph g;
  const int64_t B = 2, U = 3;
  Value x = g.parameter("x", {B, 3, U}), r = g.parameter("r", {B, 3, U});
  Value h = g.parameter("h", {B, U}), mask = g.parameter("mask", {B, 1});
  Value next = ops::gru_cell(x, r, h, mask);
  Value loss = ops::reduce_sum(next, {0, 1});
  std::vector<Value> d = gradients(loss, {h, x, r});
  Tensor m({B, 1});
  m.f32()[0] = 0.0f;
  m.f32()[1] = 1.0f;
  std::map<std::string, Tensor> leaves{{"x", random_tensor({B, 3, U}, 1)},
                                       {"r", random_tensor({B, 3, U}, 2)},
                                       {"h", random_tensor({B, U}, 3)},
                                       {"mask", m}};
  std::vector<Tensor> out = evaluate(g, leaves, {next.id, d[0].id, d[1].id, d[2].id});
  for (int64_t u = 0; u < U; ++u) {  // row 0
    EXPECT_EQ(out[0].f32()[u], leaves["h"].f32()[u]);
    EXPECT_EQ(out[1].f32()[u], 1.0f);
  }
  for (int64_t e = 0; e < 3 * U; ++e) {  // row 0's gradients of x and r
    EXPECT_EQ(out[2].f32()[e], 0.0f);
    EXPECT_EQ(out[3].f32()[e], 0.0f);
  }
  EXPECT_NE(out[0].f32()[U], leaves["h"].f32()[U]);  // row 1 stepped
}

TEST(GruCell, BadShapesAreErrors) {
  Graph g;
  Value x = g.parameter("x", {2, 3, 4}), h = g.parameter("h", {2, 4});
  EXPECT_THROW(ops::gru_cell(x, g.parameter("r", {2, 12}), h), Error);
  EXPECT_THROW(ops::gru_cell(x, x, g.parameter("h3", {3, 4})), Error);
  EXPECT_THROW(ops::gru_cell(g.parameter("x4", {2, 4, 4}), x, h), Error);
  EXPECT_THROW(ops::gru_cell(x, x, h, g.parameter("m", {2})), Error);
}

TEST(LstmCell, BadShapesAreErrors) {
  Graph g;
  Value x = g.parameter("x", {2, 4, 3}), state = g.parameter("state", {2, 2, 3});
  EXPECT_THROW(ops::lstm_cell(x, g.parameter("r", {2, 12}), state), Error);
  EXPECT_THROW(ops::lstm_cell(x, x, g.parameter("s3", {3, 2, 3})), Error);
  EXPECT_THROW(ops::lstm_cell(x, x, state, g.parameter("m", {2})), Error);
}

}  // namespace
}  // namespace autoshard
