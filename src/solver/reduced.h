// The solver's own form of a ShardingProblem: forbidden choices pruned, nodes
// tied by one-to-one edges merged into one variable, fixed nodes folded into
// their neighbours, parallel edges summed. See reduce().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autoshard/solver/problem.h"

namespace autoshard::solver {

constexpr int64_t kInf = int64_t{1} << 62;

inline int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return kInf;
  return r < kInf ? r : kInf;
}

struct Matrix {
  int rows = 0, cols = 0;
  std::vector<int64_t> c;  // rows x cols, kInf: forbidden
  int64_t at(int r, int k) const { return c[size_t(r) * cols + k]; }
  int64_t& at(int r, int k) { return c[size_t(r) * cols + k]; }
};

// One neighbour: the merged edge to it, and whether we index its rows.
struct Neighbor {
  int var;
  int edge;
  bool row;
};

// A piece of a variable's memory: usage per value while live in [lo, hi).
struct MemTerm {
  int lo = 0, hi = 0;
  std::vector<int64_t> usage;
};

struct Reduced {
  int vars = 0;
  std::vector<std::vector<int64_t>> cost;  // per variable, per value
  std::vector<std::vector<MemTerm>> mem;   // per variable
  std::vector<Matrix> edges;
  std::vector<std::vector<Neighbor>> adj;
  int segments = 1;
  // Memory is counted in units of 2^usage_shift bytes (usages rounded up,
  // the limit down), so that no sum of usages overflows 64 bits: an
  // assignment that fits in these units fits exactly. 0 unless the usages
  // of all nodes together pass 2^60. kInf: no limit, or one no assignment
  // can reach.
  int usage_shift = 0;
  int64_t limit = kInf;
  std::vector<int64_t> base;  // usage of fixed nodes per segment
  int64_t constant = 0;       // cost of fixed nodes and edges
  // Per original node: its variable (-1: fixed) and its strategy for each
  // value of that variable (fixed: one entry).
  std::vector<int> var_of;
  std::vector<std::vector<int>> strategy_of;
  bool infeasible = false;  // every choice of some node is forbidden
  std::string why;

  int dom(int v) const { return static_cast<int>(cost[v].size()); }
  int64_t edge_cost(const Neighbor& nb, int mine, int theirs) const {
    const Matrix& m = edges[nb.edge];
    return nb.row ? m.at(mine, theirs) : m.at(theirs, mine);
  }
};

// XLA's problems tie many pairs of nodes by one-to-one edges (a strategy of
// one allows exactly one strategy of the other, the rest forbidden): an op
// and the value it passes on, sharded alike. Such nodes are one decision.
// reduce() prunes forbidden values (arc consistency), merges tied nodes
// into variables, folds fixed nodes into their neighbours, and sums
// parallel edges; local moves then change whole tied groups at once.
Reduced reduce(const ShardingProblem& p);
// The original problem's strategies of a reduced assignment.
std::vector<int> expand(const Reduced& r, const std::vector<int>& s);

// A floor under the peak usage (exact bytes) of every assignment that
// avoids forbidden choices: at each time, the fixed nodes' usage plus, per
// variable, the least that its nodes live then take together under one of
// its values. Never below the problem's smallest usages at once, and above
// them where ties and pruned values keep a node from its smallest usage
// while another takes its own. A limit below it has no answer.
__int128 peak_floor(const ShardingProblem& p, const Reduced& r);

}  // namespace autoshard::solver
