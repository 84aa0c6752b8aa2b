// The solver's floor under every allowed answer's peak usage (peak_floor,
// solver/reduced.h): never above the least peak brute force finds, never
// below the smallest usages at once, and a limit under it proven
// infeasible at once rather than searched for until the time runs out.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "autoshard/solver/solver.h"
#include "sharding_problems.h"
#include "solver/reduced.h"
#include "test_util.h"

namespace autoshard {
namespace {

constexpr int64_t kForbidden = int64_t{1} << 60;

// Random nodes and edges, a third of the edges one-to-one (a permutation of
// the strategies, the rest forbidden: the ties XLA's problems are full of),
// the others random with some cells forbidden.
ShardingProblem tied_problem(std::mt19937& rng) {
  ShardingProblem p = testing::random_nodes(rng, kForbidden);
  const int n = static_cast<int>(p.nodes.size());
  const int m = static_cast<int>(rng() % (2 * n));
  for (int e = 0; e < m; ++e) {
    const int u = rng() % n, v = rng() % n;
    const size_t ku = p.nodes[u].cost.size(), kv = p.nodes[v].cost.size();
    ShardingProblem::Edge edge{u, v, std::vector<int64_t>(ku * kv, kForbidden)};
    if (ku == kv && rng() % 3 == 0) {
      std::vector<size_t> to(kv);
      std::iota(to.begin(), to.end(), 0);
      std::shuffle(to.begin(), to.end(), rng);
      for (size_t a = 0; a < ku; ++a) edge.cost[a * kv + to[a]] = int64_t(rng() % 30);
    } else {
      for (int64_t& c : edge.cost) c = rng() % 9 == 0 ? kForbidden : int64_t(rng() % 30);
    }
    p.edges.push_back(edge);
  }
  return p;
}

// The least peak over the assignments that avoid forbidden choices, by
// enumeration; -1 when every assignment takes one.
__int128 least_peak(ShardingProblem p) {
  p.usage_limit.reset();
  return testing::least_feasible(p,
                                 [&](const std::vector<int>& s) { return p.exact_peak_usage(s); });
}

// Each node's smallest usage, all at once (the check solve() made first).
__int128 smallest_usages(const ShardingProblem& p) {
  std::vector<int> smallest;
  for (const auto& node : p.nodes)
    smallest.push_back(
        int(std::min_element(node.usage.begin(), node.usage.end()) - node.usage.begin()));
  return p.exact_peak_usage(smallest);
}

TEST(PeakFloor, NeverAboveTheLeastPeakNorBelowTheSmallestUsages) {
  std::mt19937 rng(59);
  int checked = 0, above_smallest = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const ShardingProblem p = tied_problem(rng);
    const solver::Reduced r = solver::reduce(p);
    const __int128 least = least_peak(p);
    if (r.infeasible) {
      EXPECT_EQ(to_string(least), "-1") << "trial " << trial;
      continue;
    }
    if (least < 0) continue;  // forbidden through cycles that reduce() does not see
    const __int128 floor = solver::peak_floor(p, r);
    EXPECT_LE(floor, least) << "trial " << trial;
    EXPECT_GE(floor, smallest_usages(p)) << "trial " << trial;
    ++checked;
    above_smallest += floor > smallest_usages(p);
  }
  EXPECT_GT(checked, 300);
  EXPECT_GT(above_smallest, 10);  // the ties and pruned values count
}

// On the contest's published example and on a problem of 40 nodes: under
// every answer the solver finds, at every limit it finds one.
TEST(PeakFloor, UnderTheSolversAnswers) {
  std::vector<ShardingProblem> problems{
      ShardingProblem::read(std::string(AUTOSHARD_TEST_DATA) + "/iopddl_example.json"),
      testing::busy_problem()};
  for (ShardingProblem& p : problems) {
    const __int128 floor = solver::peak_floor(p, solver::reduce(p));
    for (double fraction : {1.0, 0.8, 0.6}) {
      if (p.usage_limit) p.usage_limit = int64_t(double(*p.usage_limit) * fraction);
      const SolveResult r =
          solve(p, {.time_limit_s = 2, .deterministic = true, .max_rounds = 5, .programs = false});
      if (!r.feasible) continue;
      EXPECT_LE(floor, p.exact_peak_usage(r.strategy)) << p.name;
    }
  }
}

// Two values live together, tied one-to-one in reverse: one of them holds
// 10 bytes whatever the choice, so 5 bytes never fit, though the smallest
// usages alone (1 + 1) do. Proven before any search, not after 20 s.
TEST(PeakFloor, ALimitUnderItIsProvenInfeasibleAtOnce) {
  ShardingProblem p;
  for (int i = 0; i < 2; ++i) p.nodes.push_back({0, 4, {0, 0}, {10, 1}});
  p.edges.push_back({0, 1, {kForbidden, 0, 0, kForbidden}});
  p.usage_limit = 5;
  ASSERT_LE(smallest_usages(p), *p.usage_limit);
  const SolveResult r = solve(p, {.time_limit_s = 20});
  EXPECT_FALSE(r.feasible);
  EXPECT_TRUE(r.proven_infeasible);
  EXPECT_LT(r.seconds, 1.0);
  EXPECT_NE(r.why.find("the choices its edges allow"), std::string::npos) << r.why;
  EXPECT_NE(r.why.find("peak at 11"), std::string::npos) << r.why;
  p.usage_limit = 11;  // the floor itself fits
  EXPECT_TRUE(solve(p, {.time_limit_s = 5, .max_rounds = 3}).feasible);
}

}  // namespace
}  // namespace autoshard
