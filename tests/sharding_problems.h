// Sharding problems shared by the solver tests.
#pragma once

#include <random>
#include <set>
#include <utility>
#include <vector>

#include "autoshard/solver/problem.h"

namespace autoshard::testing {

// 2-7 nodes of 1-4 strategies (costs below 20, a seventh of them `forbidden`),
// each live over a random interval with small usages; edges are the caller's.
inline ShardingProblem random_nodes(std::mt19937& rng, int64_t forbidden) {
  ShardingProblem p;
  const int n = 2 + static_cast<int>(rng() % 6);
  for (int i = 0; i < n; ++i) {
    ShardingProblem::Node node;
    const int k = 1 + static_cast<int>(rng() % 4);
    node.lo = rng() % 5;
    node.hi = node.lo + rng() % 4;
    for (int j = 0; j < k; ++j) {
      node.cost.push_back(rng() % 7 == 0 ? forbidden : int64_t(rng() % 20));
      node.usage.push_back(rng() % 10);
    }
    p.nodes.push_back(node);
  }
  return p;
}

// A problem whose whole program keeps CBC busy for many seconds: 40 nodes
// of 6 strategies, 200 random edges (7,200 columns: "tiny", so CBC runs
// even with under a second left) and a memory limit.
inline ShardingProblem busy_problem() {
  std::mt19937 rng(1);
  ShardingProblem p;
  for (int i = 0; i < 40; ++i) {
    ShardingProblem::Node node;
    node.lo = rng() % 20;
    node.hi = node.lo + 1 + rng() % 10;
    for (int j = 0; j < 6; ++j)
      node.cost.push_back(rng() % 1000), node.usage.push_back(rng() % 100);
    p.nodes.push_back(node);
  }
  std::set<std::pair<int, int>> pairs;
  while (pairs.size() < 200) {
    const int u = rng() % 40, v = rng() % 40;
    if (u < v) pairs.insert({u, v});
  }
  for (auto [u, v] : pairs) {
    ShardingProblem::Edge edge{u, v, {}};
    for (int a = 0; a < 36; ++a) edge.cost.push_back(rng() % 1000);
    p.edges.push_back(edge);
  }
  p.usage_limit = 1000;
  return p;
}

// The least of `value` over the feasible assignments, by enumeration; -1
// if none is feasible.
template <typename Value>
__int128 least_feasible(const ShardingProblem& p, Value value) {
  std::vector<int> s(p.nodes.size(), 0);
  __int128 best = -1;
  while (true) {
    if (p.feasible(s)) {
      const __int128 v = value(s);
      if (best < 0 || v < best) best = v;
    }
    size_t i = 0;
    while (i < s.size() && ++s[i] == static_cast<int>(p.nodes[i].cost.size())) s[i++] = 0;
    if (i == s.size()) return best;
  }
}

// The cheapest feasible assignment by enumeration, or -1 if none.
inline __int128 brute_force(const ShardingProblem& p) {
  return least_feasible(p, [&](const std::vector<int>& s) { return p.cost(s); });
}

}  // namespace autoshard::testing
