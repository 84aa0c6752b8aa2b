// Dropout while training: the rate and the 1/(1-p) scaling hold, masks change
// from step to step, repeat for the same step, differ between two layers,
// and are the same on any sharding (keyed by global element index).
#include <gtest/gtest.h>

#include "autoshard/ir/ops.h"
#include "autoshard/nn/layers.h"
#include "autoshard/runtime/sharded_executor.h"
#include "test_util.h"

namespace autoshard {
namespace {

constexpr double kRate = 0.3;

struct DropoutGraph {
  Graph g;
  int x, y;
  DropoutGraph(Shape shape, uint64_t seed) {
    Value in = g.parameter("x", shape);
    x = in.id;
    y = ops::dropout(in, kRate, seed).id;
  }
};

Tensor run_step(const DropoutGraph& d, const Tensor& x, int64_t step) {
  Executor exec(d.g, {d.y});
  exec.bind(d.x, x);
  exec.run({step, 0});
  return exec.value(d.y).clone();
}

TEST(Dropout, RateAndScalingWhileTraining) {
  DropoutGraph d({200, 300}, 7);
  const Tensor ones = Tensor::full({200, 300}, 1.0f);
  const Tensor y = run_step(d, ones, 1);
  int64_t zeros = 0;
  for (float v : y.to_vector()) {
    if (v == 0.0f)
      ++zeros;
    else
      ASSERT_FLOAT_EQ(v, static_cast<float>(1.0 / (1.0 - kRate)));
  }
  EXPECT_NEAR(double(zeros) / y.numel(), kRate, 0.01);
}

TEST(Dropout, MasksChangeWithTheStepAndRepeatForTheSameStep) {
  DropoutGraph d({100, 100}, 7);
  const Tensor ones = Tensor::full({100, 100}, 1.0f);
  const Tensor a = run_step(d, ones, 1), b = run_step(d, ones, 2), again = run_step(d, ones, 1);
  int64_t differ = 0;
  for (int64_t i = 0; i < a.numel(); ++i) differ += (a.f32()[i] == 0) != (b.f32()[i] == 0);
  // Independent masks disagree on a fraction 2 p (1 - p) = 0.42 of elements.
  EXPECT_NEAR(double(differ) / a.numel(), 2 * kRate * (1 - kRate), 0.02);
  EXPECT_EQ(max_abs_diff(a, again), 0.0);
}

TEST(Dropout, TwoLayersDrawDifferentMasks) {
  Graph g;
  Trace trace(g, /*training=*/true, /*seed=*/0);
  Value x = g.parameter("x", {50, 40});
  Value a = Dropout(kRate, 0, "first")(trace, x);
  Value b = Dropout(kRate, 0, "second")(trace, x);
  Executor exec(g, {a.id, b.id});
  const Tensor ones = Tensor::full({50, 40}, 1.0f);
  exec.bind(x.id, ones);
  exec.run({1, 0});
  int64_t differ = 0;
  for (int64_t i = 0; i < ones.numel(); ++i)
    differ += (exec.value(a.id).f32()[i] == 0) != (exec.value(b.id).f32()[i] == 0);
  EXPECT_GT(differ, ones.numel() / 4);
}

TEST(Dropout, TheSameMaskOnEverySharding) {
  DropoutGraph d({7, 5, 6}, 3);
  const Tensor x = testing::random_tensor({7, 5, 6}, 1);
  const DeviceMesh mesh({2, 3}, {"a", "b"});
  for (int64_t step : {1, 2}) {
    const Tensor want = run_step(d, x, step);
    for (const Sharding& s : {Sharding{{0, 1, -1}, {}}, Sharding{{-1, 0, 1}, {}},
                              Sharding{{1, -1, 0}, {}}, Sharding{{-1, -1, 1}, {}}}) {
      ShardedExecutor exec(d.g, mesh, std::map<int, Sharding>{{d.x, s}}, {d.y});
      std::vector<Tensor> blocks;
      for (int dev = 0; dev < mesh.size(); ++dev) {
        blocks.push_back(block_of(x, s, mesh, dev));
        exec.bind(dev, d.x, blocks.back());
      }
      exec.run({step, 0});
      EXPECT_EQ(max_abs_diff(exec.output(0), want), 0.0) << s.to_string(mesh) << " step " << step;
    }
  }
}

}  // namespace
}  // namespace autoshard
