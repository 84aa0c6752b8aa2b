// The solver's price step (solver/prices.h) on its own: Polyak's rule raises
// an answer's Lagrangian value by theta times the gap to the target, in
// whatever units the costs and usages come (the rule it replaced took 40
// rounds to find S's scale), and no price goes below zero.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "solver/prices.h"

namespace autoshard::solver {
namespace {

std::vector<int64_t> random_profile(std::mt19937& rng, int n, int64_t unit) {
  std::vector<int64_t> profile(n);
  for (int64_t& u : profile) u = int64_t(rng() % 200) * unit;  // the limit: 100 units
  return profile;
}

TEST(SolverPrices, AStepRaisesTheValueByThetaTimesTheGap) {
  std::mt19937 rng(2);
  for (PriceRule rule : {PriceRule::kPerByte, PriceRule::kFlat})
    for (int trial = 0; trial < 100; ++trial) {
      const int64_t unit = int64_t{1} << (rng() % 40);
      const std::vector<int64_t> profile = random_profile(rng, 1 + int(rng() % 50), unit);
      const int64_t limit = 100 * unit;
      std::vector<double> prices(profile.size(), 0.0);
      const double cost = double(rng() % 1000000), target = cost * 1.5 + 10, theta = 0.5;
      const double before = lagrangian_value(prices, profile, limit, cost);
      const bool overflows = *std::max_element(profile.begin(), profile.end()) > limit;
      ASSERT_EQ(step_prices(prices, profile, limit, before, target, theta, rule), overflows);
      if (!overflows) continue;
      // From zero, only overflowing segments get a price: none is clipped.
      const double after = lagrangian_value(prices, profile, limit, cost);
      EXPECT_NEAR(after - before, theta * (target - before), 1e-9 * target) << trial;
      for (size_t t = 0; t < prices.size(); ++t) EXPECT_EQ(prices[t] > 0, profile[t] > limit);
    }
}

// Prices are cost per byte: costs 1000 times larger, prices 1000 times
// larger; usages 2^20 times larger, prices 2^20 times smaller.
TEST(SolverPrices, PricesFollowTheUnitsOfCostsAndUsages) {
  std::mt19937 rng(4);
  const std::vector<int64_t> profile = random_profile(rng, 40, 1);
  std::vector<int64_t> wide = profile;
  for (int64_t& u : wide) u <<= 20;
  for (PriceRule rule : {PriceRule::kPerByte, PriceRule::kFlat}) {
    std::vector<double> a(40, 0.0), b(40, 0.0), c(40, 0.0);
    step_prices(a, profile, 100, 5000, 8000, 1, rule);
    step_prices(b, profile, 100, 5000e3, 8000e3, 1, rule);
    step_prices(c, wide, int64_t{100} << 20, 5000, 8000, 1, rule);
    for (int t = 0; t < 40; ++t) {
      EXPECT_NEAR(b[t], 1000 * a[t], 1e-9 * b[t]);
      EXPECT_NEAR(c[t], a[t] / (1 << 20), 1e-9 * a[t]);
    }
  }
}

// Where an answer has room, its prices fall, never below zero; a step
// that would lower the value (a target below it) moves prices the other
// way, also never below zero.
TEST(SolverPrices, PricesFallWhereThereIsRoomAndStayAtOrAboveZero) {
  std::vector<double> prices = {5, 5, 5, 0};
  const std::vector<int64_t> profile = {150, 100, 40, 10};  // limit 100
  for (PriceRule rule : {PriceRule::kPerByte, PriceRule::kFlat}) {
    std::vector<double> p = prices;
    ASSERT_TRUE(step_prices(p, profile, 100, 0, 1000, 1, rule));
    EXPECT_GT(p[0], 5);
    EXPECT_EQ(p[1], 5);  // at the limit: no overflow, no room
    EXPECT_LT(p[2], 5);
    EXPECT_EQ(p[3], 0);  // room, no price: stays at zero
    std::vector<double> q = prices;
    ASSERT_TRUE(step_prices(q, profile, 100, 0, -1e9, 1, rule));
    for (double x : q) EXPECT_GE(x, 0);
    EXPECT_EQ(q[0], 0);  // pushed below zero, held there
  }
}

}  // namespace
}  // namespace autoshard::solver
