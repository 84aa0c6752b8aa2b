// The solver's memory profile (solver/max_tree.h: a segment tree with range
// add and range max) against a plain array under random range updates: the
// largest usage, the largest over any range and the first segment at the
// peak agree after every update.
#include "solver/max_tree.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace autoshard::solver {
namespace {

TEST(SolverMaxTree, MatchesANaiveProfile) {
  std::mt19937 rng(7);
  for (int n : {1, 2, 3, 7, 64, 1000}) {
    MaxTree tree(n);
    std::vector<int64_t> naive(n, 0);
    for (int step = 0; step < 2000; ++step) {
      const int lo = int(rng() % n), hi = lo + 1 + int(rng() % (n - lo));
      // Usages as large as the solver's 2^60 units, of either sign.
      const int64_t v = int64_t(rng() % 2001) - 1000 + (rng() % 50 == 0 ? int64_t{1} << 50 : 0);
      tree.add(lo, hi, v);
      for (int t = lo; t < hi; ++t) naive[t] += v;
      const auto peak = std::max_element(naive.begin(), naive.end());
      ASSERT_EQ(tree.max(), *peak) << "n " << n << " step " << step;
      ASSERT_EQ(tree.argmax(), int(peak - naive.begin())) << "n " << n << " step " << step;
      const int a = int(rng() % n), b = a + 1 + int(rng() % (n - a));
      ASSERT_EQ(tree.max(a, b), *std::max_element(naive.begin() + a, naive.begin() + b));
    }
    EXPECT_EQ(tree.max(3, 3), INT64_MIN);  // an empty range
  }
}

}  // namespace
}  // namespace autoshard::solver
