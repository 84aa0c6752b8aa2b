// Concat against the pads and adds it replaces, and the differentiation's
// use of it: the gradient of a sequence cut into its steps (one crop each)
// is one concat of the steps' gradients, not a sum of pads of the whole.
#include <gtest/gtest.h>

#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "test_util.h"

namespace autoshard {
namespace concat_test {

using testing::evaluate;
using testing::random_tensor;

std::vector<int64_t> all_axes(const Value& v) {
  std::vector<int64_t> axes;
  for (int a = 0; a < v.rank(); ++a) axes.push_back(a);
  return axes;
}

// Along each axis of a rank-3 value, runs of lengths 2, 1 and 3: concat
// gives exactly the sum of each run padded with zeros to its place.
TEST(Concat, EqualsTheSumOfPaddedParts) {
  for (int axis = 0; axis < 3; ++axis) {
    Graph g;
    std::map<std::string, Tensor> leaves;
    std::vector<Value> parts;
    const std::vector<int64_t> lengths{2, 1, 3};
    for (size_t i = 0; i < lengths.size(); ++i) {
      Shape s{4, 3, 5};
      s[axis] = lengths[i];
      const std::string name = "p" + std::to_string(i);
      parts.push_back(g.parameter(name, s));
      leaves[name] = random_tensor(s, 10 + i);
    }
    Value joined = ops::concat(parts, axis);
    Value composed;
    int64_t at = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      std::vector<int64_t> lo(3, 0), hi(3, 0);
      lo[axis] = at;
      hi[axis] = 6 - at - lengths[i];
      at += lengths[i];
      Value placed = ops::pad(parts[i], lo, hi);
      composed = composed.valid() ? composed + placed : placed;
    }
    ASSERT_EQ(joined.shape(), composed.shape());
    const std::vector<Tensor> out = evaluate(g, leaves, {joined.id, composed.id});
    EXPECT_EQ(max_abs_diff(out[0], out[1]), 0.0) << "axis " << axis;
  }
}

// loss = sum_t <w_t, x[t]> over the chosen steps t of x [T, 3, 5]: the
// gradient of x holds w_t at each chosen step and zeros elsewhere.
struct Steps {
  Graph g;
  std::map<std::string, Tensor> leaves;
  Value x, dx;
  Tensor expected;
};

std::unique_ptr<Steps> crop_steps(int64_t T, const std::vector<std::pair<int64_t, int64_t>>& runs) {
  auto s = std::make_unique<Steps>();
  s->x = s->g.parameter("x", {T, 3, 5});
  s->leaves["x"] = random_tensor({T, 3, 5}, 1);
  s->expected = Tensor({T, 3, 5});
  Value loss;
  for (size_t k = 0; k < runs.size(); ++k) {
    const auto [begin, length] = runs[k];
    Value crop = ops::pad(s->x, {-begin, 0, 0}, {-(T - begin - length), 0, 0});
    const std::string name = "w" + std::to_string(k);
    Value w = s->g.parameter(name, crop.shape());
    const Tensor wt = random_tensor(crop.shape(), 20 + k);
    s->leaves[name] = wt;
    for (int64_t e = 0; e < wt.numel(); ++e) s->expected.f32()[begin * 15 + e] += wt.f32()[e];
    Value term = ops::reduce_sum(crop * w, all_axes(crop));
    loss = loss.valid() ? loss + term : term;
  }
  s->dx = gradients(loss, {s->x})[0];
  return s;
}

TEST(Concat, TheGradientOfASequencesStepsIsOneConcat) {
  auto s = crop_steps(6, {{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}, {5, 1}});
  EXPECT_EQ(s->dx.node().op, Op::Concat);
  EXPECT_EQ(max_abs_diff(evaluate(s->g, s->leaves, {s->dx.id})[0], s->expected), 0.0);
}

TEST(Concat, StepsLeftOutOfTheGradientAreZeros) {
  // Steps 0 and 3 unused, one run of two steps, out of order.
  auto s = crop_steps(7, {{4, 1}, {1, 2}, {5, 1}, {6, 1}});
  EXPECT_EQ(s->dx.node().op, Op::Concat);
  EXPECT_EQ(max_abs_diff(evaluate(s->g, s->leaves, {s->dx.id})[0], s->expected), 0.0);
}

TEST(Concat, OverlappingCropsAreStillAdded) {
  auto s = crop_steps(6, {{0, 2}, {1, 2}, {2, 2}, {3, 2}, {4, 2}});
  EXPECT_NE(s->dx.node().op, Op::Concat);
  EXPECT_LT(max_abs_diff(evaluate(s->g, s->leaves, {s->dx.id})[0], s->expected), 1e-6);
}

TEST(Concat, RefusesPartsThatDifferOffTheAxis) {
  Graph g;
  Value a = g.parameter("a", {2, 3}), b = g.parameter("b", {2, 4});
  try {
    ops::concat({a, b}, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("differs from [2, 3] off the axis 0"), std::string::npos)
        << e.what();
  }
}

}  // namespace concat_test
}  // namespace autoshard
