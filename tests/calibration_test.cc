// Calibration: a quick run on this machine gives a cluster whose every
// figure is in a physically sane range and which survives its own JSON;
// the alpha-beta fit recovers a known line exactly.
#include "autoshard/plan/calibration.h"

#include <gtest/gtest.h>

#include <thread>

#include "autoshard/ir/graph.h"
#include "autoshard/ir/ops.h"
#include "autoshard/plan/cost_model.h"

namespace autoshard {
namespace {

// The bandwidth from the messages of 1 MiB and up, the latency from the smallest.
TEST(Calibration, FitRecoversAKnownLatencyAndBandwidth) {
  std::vector<std::pair<double, double>> points;
  for (double bytes : {1e3, 1e4, 1e5, 4e6, 16e6, 64e6})
    points.push_back({bytes, 3e-6 + bytes / 5e9});
  const auto [alpha, bandwidth] = fit_alpha_beta(points);
  EXPECT_NEAR(alpha, 3e-6, 1e-12);
  EXPECT_NEAR(bandwidth, 5e9, 1e3);
}

// Bounds a machine of the last decade meets with margins of 10x or more
// (sanitizers included); a unit slip (bytes for bits, ms for s, a rate
// inverted) falls outside them.
TEST(Calibration, AQuickRunDescribesThisMachineSanely) {
  const Calibration cal = calibrate({.quick = true});
  const Cluster& c = cal.cluster;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(c.name, "cpu");
  EXPECT_EQ(c.shared_cores, cores);
  EXPECT_GT(c.flops_f32, 1e8 * cores);  // per core: more than 0.1 GFLOP/s, less than 10 TFLOP/s
  EXPECT_LT(c.flops_f32, 1e13 * cores);
  ASSERT_FALSE(c.gemm_efficiency.empty());
  double best = 0;
  for (size_t i = 0; i < c.gemm_efficiency.size(); ++i) {
    const auto [flops, fraction] = c.gemm_efficiency[i];
    if (i > 0) {
      EXPECT_GT(flops, c.gemm_efficiency[i - 1].first);  // ascending sizes
    }
    EXPECT_GT(fraction, 0);
    EXPECT_LE(fraction, 1);
    best = std::max(best, fraction);
  }
  EXPECT_DOUBLE_EQ(best, 1);  // fractions of the measured peak
  EXPECT_GT(c.kernel_bandwidth, 1e8);
  EXPECT_LT(c.kernel_bandwidth, 1e13);
  EXPECT_GE(c.memory_bandwidth, c.kernel_bandwidth);
  EXPECT_GT(c.kernel_flops, 1e7);
  EXPECT_GE(c.op_overhead, 0);
  EXPECT_LT(c.op_overhead, 1e-2);
  EXPECT_GT(c.process_bytes, 1e5);
  EXPECT_GT(c.memory_bytes, c.process_bytes);
  ASSERT_EQ(c.links.size(), 1u);
  EXPECT_GT(c.links[0].bandwidth, 1e7);
  EXPECT_GE(c.links[0].latency, 0);
  EXPECT_LT(c.links[0].latency, 1e-2);
  EXPECT_GE(c.oversubscribed_efficiency, 0.1);
  EXPECT_LE(c.oversubscribed_efficiency, 1);
  EXPECT_GE(c.oversubscribed_wait, 0);
  EXPECT_LT(c.oversubscribed_wait, 0.1);
  EXPECT_GE(c.oversubscribed_slice, 0);
  EXPECT_LT(c.oversubscribed_slice, 10);
  if (cores == 1) {
    EXPECT_EQ(c.oversubscribed_slice, 0);  // one core: no idle last turn
  }
  EXPECT_TRUE(cal.measurements.contains("gemm_flops_per_s_one_core"));
  EXPECT_TRUE(cal.measurements.contains("thread_all_reduce"));

  // What `calibrate --out` writes is what the "cpu" preset reads back.
  const Cluster read = Cluster::from_json(c.to_json(), "calibrated");
  EXPECT_DOUBLE_EQ(read.flops_f32, c.flops_f32);
  EXPECT_DOUBLE_EQ(read.kernel_bandwidth, c.kernel_bandwidth);
  EXPECT_DOUBLE_EQ(read.oversubscribed_slice, c.oversubscribed_slice);
  EXPECT_EQ(read.gemm_efficiency, c.gemm_efficiency);
  EXPECT_DOUBLE_EQ(read.links[0].bandwidth, c.links[0].bandwidth);
  // And it prices: a product 8x larger takes longer on it.
  auto product_seconds = [&](int64_t n) {
    Graph g;
    const Value a = g.parameter("a", {n, n}), b = g.parameter("b", {n, n});
    const Node& product = g.node(ops::einsum("ij,jk->ik", a, b).id);
    return op_seconds(read, product, {{n, n}, {n, n}}, {n, n}, 1, false);
  };
  EXPECT_GT(product_seconds(64), 0);
  EXPECT_GT(product_seconds(128), product_seconds(64));
}

}  // namespace
}  // namespace autoshard
