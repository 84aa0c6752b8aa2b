// Lane reductions (the vectorised row sums and maxima of the softmax, norm
// and cross-entropy kernels) against plain serial loops.
#include "tensor/lanes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "tensor/broadcast.h"

using namespace autoshard;

TEST(Lanes, SumsAndMaximaMatchSerialLoops) {
  for (int64_t n : {0, 1, 15, 16, 17, 1000, 1024, 1025, 50257}) {
    std::vector<float> x(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) x[i] = std::sin(0.37f * i) * (1 + i % 7);
    double serial = 0;
    float mx = -INFINITY;
    for (float v : x) serial += v, mx = std::max(mx, v);
    const double ours = lane_sum<double>(n, [&](int64_t i) { return x[i]; });
    EXPECT_NEAR(ours, serial, 1e-6 * (1 + std::abs(serial)) * std::sqrt(double(n) + 1)) << n;
    EXPECT_NEAR(lane_sum<float>(n, [&](int64_t i) { return x[i]; }), serial, 1e-5 * (1 + n)) << n;
    EXPECT_EQ(lane_max(x.data(), n), mx) << n;
  }
}

// A NaN anywhere makes the maximum NaN, as PyTorch's amax: a row max that
// skipped it would hide a diverged value (see tests/nan_propagation_test.cc).
TEST(Lanes, MaxPropagatesNaN) {
  for (int at : {0, 3, 20, 39}) {
    std::vector<float> x(40, 1.0f);
    x[at] = NAN;
    x[at == 20 ? 21 : 20] = 5.0f;
    EXPECT_TRUE(std::isnan(lane_max(x.data(), 40))) << at;
  }
}

// A range of runs of a broadcast walk visits exactly the runs the whole walk
// visits at those positions.
TEST(Lanes, BroadcastRunRangesMatchTheWholeWalk) {
  const BroadcastPlan plan = plan_broadcast({3, 4, 5}, {{3, 1, 5}, {4, 1}});
  std::vector<std::vector<int64_t>> whole;
  for_each_run(plan, [&](int64_t o, const std::vector<int64_t>& off, int64_t n,
                         const std::vector<int64_t>&) {
    whole.push_back({o, off[0], off[1], n});
  });
  ASSERT_EQ(static_cast<int64_t>(whole.size()), run_count(plan));
  for (int64_t first = 0; first < run_count(plan); ++first) {
    std::vector<std::vector<int64_t>> part;
    for_each_run(
        plan, first, run_count(plan),
        [&](int64_t o, const std::vector<int64_t>& off, int64_t n, const std::vector<int64_t>&) {
          part.push_back({o, off[0], off[1], n});
        });
    EXPECT_EQ(part, std::vector<std::vector<int64_t>>(whole.begin() + first, whole.end()));
  }
}

// An empty output has no runs: nothing is called (and nothing divides by
// its zero-sized dimension).
TEST(Lanes, EmptyBroadcastWalksCallNothing) {
  const BroadcastPlan plan = plan_broadcast({3, 0, 5}, {{3, 0, 5}, {5}});
  EXPECT_EQ(run_count(plan), 0);
  int calls = 0;
  for_each_run(plan, [&](int64_t, const std::vector<int64_t>&, int64_t,
                         const std::vector<int64_t>&) { ++calls; });
  EXPECT_EQ(calls, 0);
}
