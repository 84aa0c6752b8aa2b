// The sharding solver against brute force on small generated problems (with
// and without memory limits, feasible or not), the contest format read and
// written, and a proof of infeasibility when even the smallest usages
// overflow.
#include "autoshard/solver/solver.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <atomic>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "autoshard/error.h"
#include "sharding_problems.h"
#include "test_util.h"

namespace autoshard {
namespace {

ShardingProblem random_problem(std::mt19937& rng) {
  ShardingProblem p = testing::random_nodes(rng, int64_t{1} << 60);
  const int n = static_cast<int>(p.nodes.size());
  const int m = static_cast<int>(rng() % (2 * n));
  for (int e = 0; e < m; ++e) {
    const int u = rng() % n, v = rng() % n;
    ShardingProblem::Edge edge{u, v, {}};
    for (size_t a = 0; a < p.nodes[u].cost.size() * p.nodes[v].cost.size(); ++a)
      edge.cost.push_back(rng() % 9 == 0 ? int64_t{1} << 60 : int64_t(rng() % 30));
    p.edges.push_back(edge);
  }
  if (rng() % 3 != 0) p.usage_limit = rng() % 25;
  return p;
}

TEST(Solver, MatchesBruteForceOnSmallProblems) {
  std::mt19937 rng(12);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const ShardingProblem p = random_problem(rng);
    const __int128 want = testing::brute_force(p);
    SolveOptions o;
    o.time_limit_s = 30;
    o.max_rounds = 20;
    const SolveResult r = solve(p, o);
    if (want < 0) {
      ++infeasible;
      EXPECT_FALSE(r.feasible) << "trial " << trial;
    } else {
      ++feasible;
      ASSERT_TRUE(r.feasible) << "trial " << trial << " (" << r.why << ")";
      EXPECT_EQ(to_string(r.cost), to_string(want)) << "trial " << trial;
      EXPECT_TRUE(p.feasible(r.strategy));
      EXPECT_EQ(to_string(p.cost(r.strategy)), to_string(r.cost));
    }
  }
  EXPECT_GT(feasible, 100);
  EXPECT_GT(infeasible, 10);
}

TEST(Solver, TheContestExample) {
  const ShardingProblem p =
      ShardingProblem::read(std::string(AUTOSHARD_TEST_DATA) + "/iopddl_example.json");
  EXPECT_EQ(p.nodes.size(), 5u);
  EXPECT_EQ(p.edges.size(), 5u);
  EXPECT_EQ(*p.usage_limit, 50);
  const SolveResult r = solve(p, {.time_limit_s = 10, .max_rounds = 10});
  ASSERT_TRUE(r.feasible);
  EXPECT_EQ(to_string(r.cost), to_string(testing::brute_force(p)));
}

TEST(Solver, ProvesInfeasibilityWhenTheSmallestUsagesOverflow) {
  ShardingProblem p;
  p.nodes = {{0, 10, {1, 2}, {5, 7}}, {5, 8, {3}, {6}}};
  p.usage_limit = 10;  // 5 + 6 > 10 whatever is chosen
  const SolveResult r = solve(p, {.time_limit_s = 5});
  EXPECT_FALSE(r.feasible);
  EXPECT_TRUE(r.proven_infeasible);
  EXPECT_NE(r.why.find("smallest usages"), std::string::npos) << r.why;
}

TEST(Solver, UsagesWhoseSumsPass2To63MatchBruteForce) {
  // The same small problems with every usage and limit times 2^58: sums of
  // a few nodes pass 2^63, where 64-bit profiles wrapped negative.
  std::mt19937 rng(21);
  int feasible = 0;
  for (int trial = 0; trial < 100; ++trial) {
    ShardingProblem p = random_problem(rng);
    for (auto& node : p.nodes)
      for (int64_t& u : node.usage) u <<= 58;
    if (p.usage_limit) *p.usage_limit <<= 58;
    const __int128 want = testing::brute_force(p);
    const SolveResult r = solve(p, {.time_limit_s = 30, .max_rounds = 20});
    ASSERT_EQ(r.feasible, want >= 0) << "trial " << trial << " (" << r.why << ")";
    if (want < 0) continue;
    ++feasible;
    EXPECT_EQ(to_string(r.cost), to_string(want)) << "trial " << trial;
    EXPECT_TRUE(p.feasible(r.strategy));
  }
  EXPECT_GT(feasible, 30);
}

TEST(Solver, DeterministicForASeedAndRounds) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 20; ++trial) {
    const ShardingProblem p = random_problem(rng);
    const SolveOptions o{.time_limit_s = 30, .seed = 9, .max_rounds = 5};
    EXPECT_EQ(solve(p, o).strategy, solve(p, o).strategy) << trial;
  }
}

// --deterministic: limits counted in work. On the busy problem a 0.3 s
// clock limit ends wherever the clock says (CBC unfinished); counted in work
// two runs give the same plan and cost, bit for bit, under any load.
TEST(Solver, DeterministicModeGivesTheSameAnswerWhereTheClockDoesNotFinish) {
  const ShardingProblem p = testing::busy_problem();
  const SolveOptions o{.time_limit_s = 0.3, .deterministic = true, .seed = 4};
  const SolveResult a = solve(p, o), b = solve(p, o);
  ASSERT_TRUE(a.feasible) << a.why;
  EXPECT_FALSE(a.proven_optimal);  // the limit ends it, not a proof
  EXPECT_FALSE(a.work_guard_hit);
  EXPECT_EQ(a.strategy, b.strategy);
  EXPECT_EQ(to_string(a.cost), to_string(b.cost));
  EXPECT_EQ(a.work, b.work);
  // Two threads: each thread's search is counted alike.
  SolveOptions two = o;
  two.threads = 2;
  EXPECT_EQ(solve(p, two).strategy, solve(p, two).strategy);
  // Less work is another (no better) answer: the limit is what decides.
  SolveOptions less = o;
  less.time_limit_s = 0.01;
  const SolveResult c = solve(p, less);
  EXPECT_LE(a.work, int64_t(0.3 * kSolverWorkPerSecond) * 2);
  EXPECT_LT(c.work, a.work);
  EXPECT_GE(c.cost, a.cost);
}

// CBC overshot its own limit by seconds (a 3 s limit took 11 s); it now
// runs in a process killed at the deadline. A 1 s limit answers within
// 1.1 s here; the bound asserted is 1.5 s, for CI's two loaded cores.
TEST(Solver, TimeLimitHoldsWhileCbcIsBusy) {
  const ShardingProblem p = testing::busy_problem();
  const auto start = std::chrono::steady_clock::now();
  const SolveResult r = solve(p, {.time_limit_s = 1});
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(r.feasible) << r.why;
  EXPECT_FALSE(r.proven_optimal);
  EXPECT_LT(wall, 1.5);
}

// The caller's cancel flag (the CLI's SIGTERM) ends the search at once,
// CBC included, with the best answer so far.
TEST(Solver, CancelStopsTheSearchWithItsBestAnswer) {
  const ShardingProblem p = testing::busy_problem();
  std::atomic<bool> cancel{false};
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    cancel = true;
  });
  const auto start = std::chrono::steady_clock::now();
  const SolveResult r = solve(p, {.time_limit_s = 30, .cancel = &cancel});
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stopper.join();
  EXPECT_TRUE(r.feasible) << r.why;
  EXPECT_LT(wall, 1.5);
}

// When CBC proves the heuristics' answer optimal without bettering it, the
// proof is kept and the search stops (it spent its whole limit instead).
TEST(Solver, AProvenOptimumStopsTheSearch) {
  std::mt19937 rng(5);
  int proven = 0;
  for (int trial = 0; trial < 10; ++trial) {
    // A ring of 6 nodes (a core: no tree shortcut) under a memory limit.
    ShardingProblem p;
    for (int i = 0; i < 6; ++i) {
      ShardingProblem::Node node{0, 3, {}, {}};
      for (int j = 0; j < 3; ++j) node.cost.push_back(rng() % 50), node.usage.push_back(rng() % 10);
      p.nodes.push_back(node);
    }
    for (int i = 0; i < 6; ++i) {
      ShardingProblem::Edge edge{i, (i + 1) % 6, {}};
      for (int a = 0; a < 9; ++a) edge.cost.push_back(rng() % 50);
      p.edges.push_back(edge);
    }
    p.usage_limit = 40;
    const __int128 want = testing::brute_force(p);
    if (want < 0) continue;
    const SolveResult r = solve(p, {.time_limit_s = 20});
    ASSERT_TRUE(r.feasible) << trial;
    EXPECT_EQ(to_string(r.cost), to_string(want)) << trial;
    EXPECT_TRUE(r.proven_optimal) << trial;
    EXPECT_LT(r.seconds, 2.0) << trial;
    proven += r.proven_optimal;
  }
  EXPECT_GT(proven, 5);
}

// Problems without a cycle and without a memory limit are solved exactly by
// the first round: one node, a chain, no nodes' edges at all.
TEST(Solver, TreeProblemsWithoutALimitAreProvenInOneRound) {
  ShardingProblem one;
  one.nodes = {{0, 1, {5, 3, 7}, {1, 2, 3}}};
  const SolveResult r1 = solve(one, {.time_limit_s = 20});
  EXPECT_TRUE(r1.proven_optimal);
  EXPECT_EQ(r1.strategy, std::vector<int>{1});
  EXPECT_EQ(r1.rounds, 1);
  std::mt19937 rng(8);
  ShardingProblem chain;
  for (int i = 0; i < 50; ++i)
    chain.nodes.push_back({0, 1, {int64_t(rng() % 9), int64_t(rng() % 9)}, {1, 1}});
  for (int i = 0; i + 1 < 50; ++i)
    chain.edges.push_back(
        {i,
         i + 1,
         {int64_t(rng() % 9), int64_t(rng() % 9), int64_t(rng() % 9), int64_t(rng() % 9)}});
  const SolveResult r2 = solve(chain, {.time_limit_s = 20});
  EXPECT_TRUE(r2.proven_optimal);
  EXPECT_LT(r2.seconds, 1.0);
}

class SolverFiles : public testing::TempDirTest {};

TEST_F(SolverFiles, ContestFormatRoundTripsPlainAndCompressed) {
  std::mt19937 rng(5);
  const ShardingProblem p = random_problem(rng);
  const std::string plain = (dir_ / "p.json").string(), packed = (dir_ / "p.json.gz").string();
  p.write(plain);
  gzFile f = gzopen(packed.c_str(), "wb");
  const std::string text = p.to_json();
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  for (const std::string& path : {plain, packed}) {
    const ShardingProblem q = ShardingProblem::read(path);
    ASSERT_EQ(q.nodes.size(), p.nodes.size());
    EXPECT_EQ(q.to_json(), p.to_json()) << path;
  }
}

TEST_F(SolverFiles, MalformedProblemsNameTheProblem) {
  auto expect_error = [&](const std::string& text, const std::string& needle) {
    try {
      ShardingProblem::parse(text, "p.json");
      ADD_FAILURE() << "no error for " << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("{not json", "invalid JSON");
  expect_error(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1,2]],"usages":[[1]]},
               "edges":{"nodes":[],"costs":[]}}})",
               "node 0 has 2 costs but 1 usages");
  expect_error(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1]],"usages":[[1]]},
               "edges":{"nodes":[[0,3]],"costs":[[1]]}}})",
               "names a node that does not exist");
  expect_error(R"({"problem":{"nodes":{"intervals":[[0,1]],"costs":[[1,2]],"usages":[[1,1]]},
               "edges":{"nodes":[[0,0]],"costs":[[1,2,3]]}}})",
               "has 3 costs, not 2 x 2");
  EXPECT_THROW(ShardingProblem::read((dir_ / "none.json").string()), Error);
}

}  // namespace
}  // namespace autoshard
