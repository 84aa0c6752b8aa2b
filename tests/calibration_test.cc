// Calibration: a quick run on this machine gives a cluster whose every
// figure is in a physically sane range and which survives its own JSON;
// the alpha-beta and GEMM fits recover known machines exactly; a product
// over few rows pays the packing of its weight.
#include "autoshard/plan/calibration.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

// Products timed on a known machine (a peak, a curve over the squares, a
// packing bandwidth) give that machine back.
TEST(Calibration, FitRecoversAKnownGemmCurveAndPackingBandwidth) {
  Cluster truth;
  truth.gemm_efficiency = {{2e3, 0.3}, {2e6, 0.8}, {2e9, 1.0}};
  const double peak = 1e11, packing = 8e9;
  auto timed = [&](double m, double n, double k) {
    const double flops = 2 * m * n * k, packed = 4 * (m * k + k * n);
    const double beyond_square = packed - Cluster::square_packed_bytes(flops);
    return GemmTiming{flops, packed,
                      flops / (peak * truth.gemm_fraction(flops)) + beyond_square / packing};
  };
  const GemmFit fit = fit_gemm({timed(10, 10, 10), timed(100, 100, 100), timed(1000, 1000, 1000)},
                               {timed(32, 3072, 768), timed(64, 768, 3072)});
  EXPECT_NEAR(fit.peak, peak, peak * 1e-6);
  EXPECT_NEAR(fit.packing_bandwidth, packing, packing * 1e-6);
  ASSERT_EQ(fit.efficiency.size(), 3u);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(fit.efficiency[i].second, truth.gemm_efficiency[i].second, 1e-6);
  // Products that take no longer than the curve says: nothing to pack.
  EXPECT_EQ(fit_gemm({timed(1000, 1000, 1000)}, {}).packing_bandwidth, 0);
}

// A cluster with a packing bandwidth prices a product over few rows higher
// per FLOP than a square one of the same FLOPs; without, the same.
TEST(Calibration, FewRowsPayThePackingOfTheWeight) {
  auto seconds = [](const Cluster& c, int64_t m, int64_t n, int64_t k) {
    Graph g;
    const Value a = g.parameter("a", {m, k}), b = g.parameter("b", {k, n});
    const Node& product = g.node(ops::einsum("ij,jk->ik", a, b).id);
    return op_seconds(c, product, {{m, k}, {k, n}}, {m, n}, 1, false);
  };
  Cluster c;
  c.flops_f32 = 1e11;
  c.memory_bandwidth = 1e11;
  c.gemm_efficiency = {{1e3, 1.0}};
  EXPECT_NEAR(seconds(c, 16, 4096, 1024), seconds(c, 256, 256, 1024), 1e-12);
  c.gemm_packing_bandwidth = 1e10;
  const double few = seconds(c, 16, 4096, 1024), square = seconds(c, 256, 256, 1024);
  EXPECT_GT(few, 1.5 * square);
  // Exactly what it packs beyond the square, at that bandwidth, on top.
  EXPECT_NEAR(few - square, 4.0 * (16 * 1024 + 1024 * 4096 - 2 * 256 * 1024) / 1e10, 1e-12);
  EXPECT_NEAR(Cluster::square_packed_bytes(2.0 * 256 * 256 * 256), 4.0 * 2 * 256 * 256, 1e-6);
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
  EXPECT_GE(c.gemm_packing_bandwidth, 0);  // 0 when the few-row product ran at the curve
  if (c.gemm_packing_bandwidth > 0) {
    EXPECT_GT(c.gemm_packing_bandwidth, 1e7);
    EXPECT_LT(c.gemm_packing_bandwidth, 1e13);
  }
  EXPECT_TRUE(cal.measurements.contains("gemm_squares_one_core"));
  EXPECT_TRUE(cal.measurements.contains("gemm_few_rows_one_core"));
  EXPECT_TRUE(cal.measurements.contains("thread_all_reduce"));

  // What `calibrate --out` writes (the cluster and its measurements) is what
  // the "cpu" preset reads back.
  nlohmann::json written = nlohmann::json::parse(c.to_json());
  written["measurements"] = cal.measurements;
  const Cluster read = Cluster::from_json(written.dump(), "calibrated");
  EXPECT_DOUBLE_EQ(read.flops_f32, c.flops_f32);
  EXPECT_DOUBLE_EQ(read.kernel_bandwidth, c.kernel_bandwidth);
  EXPECT_DOUBLE_EQ(read.oversubscribed_slice, c.oversubscribed_slice);
  EXPECT_EQ(read.gemm_efficiency, c.gemm_efficiency);
  EXPECT_DOUBLE_EQ(read.gemm_packing_bandwidth, c.gemm_packing_bandwidth);
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
