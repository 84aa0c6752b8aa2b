// The solver's memory prices (Lagrangian multipliers, one per time segment)
// and their subgradient step, apart from the search so that the step's
// properties can be tested on their own (tests/solver_prices_test.cc).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace autoshard::solver {

// The direction prices move in, per segment, from its overflow g (usage
// minus limit; negative where there is room): the overflow itself
// (kPerByte: the classical subgradient, prices pile up where the overflow is
// largest) or its sign, flattened within a tenth of the limit (kFlat: the
// whole overflowing stretch priced alike).
enum class PriceRule { kPerByte, kFlat };

inline double price_direction(PriceRule rule, double g, int64_t limit) {
  if (rule == PriceRule::kPerByte) return g;
  return std::clamp(10 * g / double(std::max<int64_t>(1, limit)), -1.0, 1.0);
}

// The Lagrangian value of an answer of true cost `cost` and memory
// `profile`: cost + sum_t price_t (profile_t - limit).
inline double lagrangian_value(const std::vector<double>& prices,
                               const std::vector<int64_t>& profile, int64_t limit, double cost) {
  double value = cost;
  for (size_t t = 0; t < prices.size(); ++t)
    value += prices[t] * (double(profile[t]) - double(limit));
  return value;
}

// Polyak's step: each price moves by step * d_t (kept at or above zero),
// the step chosen so that the answer's Lagrangian value rises by
// theta * (target - value) to first order (exactly, where no price is held
// at zero). So prices come in cost per byte whatever the problem's units.
// False when nothing overflows and nothing is priced (no step).
inline bool step_prices(std::vector<double>& prices, const std::vector<int64_t>& profile,
                        int64_t limit, double value, double target, double theta, PriceRule rule) {
  double rise = 0;
  for (size_t t = 0; t < prices.size(); ++t) {
    const double g = double(profile[t]) - double(limit);
    if (g > 0 || prices[t] > 0) rise += g * price_direction(rule, g, limit);
  }
  if (rise <= 0) return false;
  const double step = theta * (target - value) / rise;
  for (size_t t = 0; t < prices.size(); ++t)
    prices[t] = std::max(
        0.0, prices[t] + step * price_direction(rule, double(profile[t]) - double(limit), limit));
  return true;
}

}  // namespace autoshard::solver
