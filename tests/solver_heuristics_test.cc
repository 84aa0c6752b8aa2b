// The solver's heuristics alone (SolveOptions::programs off: no CBC) against
// brute force on small random problems, so that these tests measure the
// heuristics, not CBC: optimal on chains and trees without a memory limit
// (exact dynamic programming), never wrong about feasibility, and within a
// measured gap on general problems; the mesh screen never rejects a problem
// on which a plan fits; and the heuristics are deterministic in work-limited
// mode where the search does not finish.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "autoshard/solver/screen.h"
#include "autoshard/solver/solver.h"
#include "sharding_problems.h"

namespace autoshard {
namespace {

constexpr int64_t kOff = int64_t{1} << 60;  // a forbidden choice

// 2-7 nodes of 1-4 strategies, some forbidden; `shape` picks the edges:
// a chain, a random tree, or random pairs (cycles, repeats and all).
enum class EdgeShape { kChain, kTree, kGeneral };

ShardingProblem random_problem(std::mt19937& rng, EdgeShape shape, bool limited) {
  ShardingProblem p = testing::random_nodes(rng, kOff);
  const int n = static_cast<int>(p.nodes.size());
  std::vector<std::pair<int, int>> pairs;
  if (shape == EdgeShape::kGeneral) {
    for (int e = 0, m = int(rng() % (2 * n)); e < m; ++e)
      pairs.push_back({int(rng() % n), int(rng() % n)});
  } else {
    for (int v = 1; v < n; ++v)
      pairs.push_back({shape == EdgeShape::kChain ? v - 1 : int(rng() % v), v});
  }
  for (auto [u, v] : pairs) {
    ShardingProblem::Edge edge{u, v, {}};
    for (size_t a = 0; a < p.nodes[u].cost.size() * p.nodes[v].cost.size(); ++a)
      edge.cost.push_back(rng() % 9 == 0 ? kOff : int64_t(rng() % 30));
    p.edges.push_back(edge);
  }
  if (limited) p.usage_limit = rng() % 25;
  return p;
}

SolveResult heuristics(const ShardingProblem& p, int64_t rounds) {
  return solve(p, {.time_limit_s = 600, .seed = 1, .max_rounds = rounds, .programs = false});
}

// Chains and trees without a memory limit: dynamic programming is exact, in
// one round.
TEST(SolverHeuristics, ExactOnChainsAndTreesWithoutALimit) {
  std::mt19937 rng(5);
  for (EdgeShape shape : {EdgeShape::kChain, EdgeShape::kTree})
    for (int trial = 0; trial < 300; ++trial) {
      const ShardingProblem p = random_problem(rng, shape, false);
      const __int128 want = testing::brute_force(p);
      const SolveResult r = heuristics(p, 1);
      ASSERT_EQ(r.feasible, want >= 0) << "trial " << trial;
      if (want >= 0) {
        EXPECT_EQ(to_string(r.cost), to_string(want)) << "trial " << trial;
      }
    }
}

// General problems, memory limits and infeasible ones included: an answer
// said feasible is (and costs what is said), a problem with no feasible
// answer is never answered, and the gap to the optimum stays within what was
// measured (seed 11, 1,000 problems, 2026-11-25): with 20 rounds 0 misses
// and 0 suboptimal; with one round (the mesh screen's) 5 feasible problems
// missed and 3 answered above the optimum, the worst by 1.33x.
TEST(SolverHeuristics, WithinTheirMeasuredGapOnGeneralProblems) {
  for (int64_t rounds : {1, 20}) {
    std::mt19937 rng(11);
    int feasible = 0, missed = 0, suboptimal = 0;
    double worst = 1;
    for (int trial = 0; trial < 1000; ++trial) {
      const ShardingProblem p = random_problem(rng, EdgeShape::kGeneral, rng() % 3 != 0);
      const __int128 want = testing::brute_force(p);
      const SolveResult r = heuristics(p, rounds);
      if (want < 0) {
        ASSERT_FALSE(r.feasible) << "trial " << trial;
        continue;
      }
      ++feasible;
      if (!r.feasible) {
        ++missed;
        continue;
      }
      ASSERT_TRUE(p.feasible(r.strategy)) << "trial " << trial;
      ASSERT_EQ(to_string(p.cost(r.strategy)), to_string(r.cost));
      ASSERT_GE(r.cost, want) << "trial " << trial;
      if (r.cost > want) {
        ++suboptimal;
        worst = std::max(worst, double(r.cost) / double(std::max<__int128>(1, want)));
      }
    }
    std::printf("%lld rounds: %d feasible, %d missed, %d above the optimum (worst %.2fx)\n",
                (long long)rounds, feasible, missed, suboptimal, worst);
    EXPECT_GT(feasible, 400);
    EXPECT_LE(missed, rounds == 1 ? 5 : 0);
    EXPECT_LE(suboptimal, rounds == 1 ? 3 : 0);
    EXPECT_LE(worst, rounds == 1 ? 1.34 : 1.0);
  }
}

// The mesh screen on the problems where brute force finds a plan that fits:
// never "nothing fits", never "not found" (its longer search finds what one
// round missed), and never cheaper than the optimum.
TEST(SolverHeuristics, TheScreenNeverRejectsAProblemWhereAPlanFits) {
  std::mt19937 rng(11);
  int fits = 0, rescued = 0;
  for (int trial = 0; trial < 1000; ++trial) {
    const ShardingProblem p = random_problem(rng, EdgeShape::kGeneral, rng() % 3 != 0);
    const __int128 want = testing::brute_force(p);
    if (want < 0) continue;
    ++fits;
    const Screening s = screen_problem(p, 0);
    ASSERT_EQ(s.verdict, Screening::Verdict::kFits) << "trial " << trial << ": " << s.why;
    EXPECT_GE(s.cost, want);
    rescued += !heuristics(p, 1).feasible;
  }
  EXPECT_GT(fits, 400);
  EXPECT_GT(rescued, 0) << "no problem needed the screen's longer search";
}

// Proven infeasible (the smallest usages overflow): the screen says so, with
// its proof.
TEST(SolverHeuristics, TheScreenSaysNothingFitsOnlyOnAProof) {
  ShardingProblem p;
  p.nodes = {{0, 10, {1, 2}, {5, 7}}, {5, 8, {3}, {6}}};
  p.usage_limit = 10;
  const Screening s = screen_problem(p, 0);
  EXPECT_EQ(s.verdict, Screening::Verdict::kNoneFits);
  EXPECT_NE(s.why.find("smallest usages"), std::string::npos) << s.why;
}

// Repair (a heap of the moves that free memory at each peak) always makes
// the first round's answer fit when it can: problems of 300 nodes whose
// every strategy pair is allowed, so that each variable can always go to
// its smallest usage, and a limit between the smallest usages' peak and
// 1.2 times it, well below the unconstrained optimum's. One round, no
// programs: repair alone decides. A heap that missed the moves a move makes
// possible, or lost a segment's candidates, fails here.
TEST(SolverHeuristics, RepairMakesEveryFirstAnswerFitWhereItCan) {
  std::mt19937 rng(17);
  for (int trial = 0; trial < 20; ++trial) {
    ShardingProblem p;
    const int n = 300;
    for (int i = 0; i < n; ++i) {
      ShardingProblem::Node node;
      node.lo = rng() % 200;
      node.hi = node.lo + 1 + rng() % 40;
      for (int k = 0, strategies = 2 + int(rng() % 4); k < strategies; ++k) {
        // Cheaper strategies use more memory, as sharding's do.
        node.usage.push_back(int64_t(10 + rng() % 90) << (k % 3 == 0 ? 4 : 0));
        node.cost.push_back(int64_t(rng() % 100) + (node.usage.back() > 200 ? 0 : 200));
      }
      p.nodes.push_back(node);
    }
    for (int e = 0; e < 2 * n; ++e) {
      const int u = int(rng() % n), v = int(rng() % n);
      ShardingProblem::Edge edge{u, v, {}};
      for (size_t a = 0; a < p.nodes[u].cost.size() * p.nodes[v].cost.size(); ++a)
        edge.cost.push_back(int64_t(rng() % 50));
      p.edges.push_back(edge);
    }
    std::vector<int> smallest(n);
    for (int i = 0; i < n; ++i)
      smallest[i] = int(std::min_element(p.nodes[i].usage.begin(), p.nodes[i].usage.end()) -
                        p.nodes[i].usage.begin());
    const int64_t floor = p.peak_usage(smallest);
    // Half of them at the floor itself: every variable live at the peak
    // must end at its smallest usage there, a neighbour's move included.
    p.usage_limit = trial % 2 == 0 ? floor : floor + int64_t(rng() % (floor / 5 + 1));
    const SolveResult r = heuristics(p, 1);
    ASSERT_TRUE(r.feasible) << "trial " << trial << ": " << r.why;
    EXPECT_TRUE(p.feasible(r.strategy));
    // Not the fallback of a round that failed (the smallest usages): only
    // the nodes live at the peaks need them.
    EXPECT_LT(r.cost, p.cost(smallest)) << "trial " << trial;
  }
}

// A problem the heuristics do not finish in their work limit (40 nodes of 6
// strategies, 200 edges, a memory limit): two runs in deterministic mode give
// the same answer, bit for bit.
TEST(SolverHeuristics, DeterministicWhereTheSearchDoesNotFinish) {
  const ShardingProblem p = testing::busy_problem();
  const SolveOptions o{.time_limit_s = 0.05, .deterministic = true, .seed = 3, .programs = false};
  const SolveResult a = solve(p, o), b = solve(p, o);
  ASSERT_TRUE(a.feasible) << a.why;
  EXPECT_FALSE(a.proven_optimal);
  EXPECT_GT(a.rounds, 1);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(to_string(a.cost), to_string(b.cost));
  EXPECT_EQ(a.work, b.work);
  EXPECT_EQ(a.rounds, b.rounds);
}

}  // namespace
}  // namespace autoshard
