// The sharding solver: picks one strategy per node of a ShardingProblem,
// minimising total cost under the usage (memory) limit.
//
// Method: the memory limit is relaxed into a price per byte at each time
// step (Lagrangian multipliers); with prices the problem is a pairwise
// cost network, solved by exact dynamic programming over its tree-shaped
// parts (most nodes: leaves and branches hanging off a small core) and local
// search over the core. Prices rise where memory overflows and fall where it
// has room, by subgradient steps sized in cost units (Polyak's rule, aimed
// at the best answer so far; solver/prices.h); every priced solution is
// repaired to feasibility (the cheapest bytes freed at each peak first) and
// improved by
// local search under the true limit, and by mixed-integer programs (CBC):
// over the whole problem when it is small (which can prove optimality),
// else over neighbourhoods of the memory peak. Anytime (the best feasible
// answer so far is kept). Time limits are limits: every loop of a round
// checks the deadline and CBC runs in a child process killed at it, so
// solve() returns within the limit plus reducing the problem (linear).
// Deterministic for a given seed and round limit with one thread when CBC
// finishes in its time, and always with SolveOptions::deterministic (limits
// counted in work, not seconds); several threads run independent searches
// from different seeds and alternating price rules, one of them with the
// programs.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autoshard/solver/problem.h"

namespace autoshard {

struct SolveProgress {
  double seconds = 0;
  __int128 cost = 0;  // of the best feasible answer so far
  int64_t peak_usage = 0;
  int64_t round = 0;
};

// Work units per second of the time limit in deterministic mode: one unit
// is one cost-table entry read (a strategy pair priced, a message entry
// sent), CBC's LP iterations counted as ten per program column. Measured on the
// development machine's cores (docs/planner.md, "Deterministic limits"), so
// a deterministic limit of S takes about S seconds there.
inline constexpr double kSolverWorkPerSecond = 150e6;

struct SolveOptions {
  double time_limit_s = 60;
  // Limits counted in work instead of the clock: time_limit_s becomes
  // time_limit_s * kSolverWorkPerSecond units per thread, CBC gets an LP
  // iteration limit instead of seconds, and no decision reads the clock, so the answer
  // is bit-identical across runs and machines for a seed (with any number of
  // threads). CBC's process is still killed if it runs past ten times its
  // share (at least 10 s): a guard against a hang, which would break the
  // determinism and is reported in SolveResult::work_guard_hit.
  bool deterministic = false;
  int threads = 1;
  uint64_t seed = 0;
  int64_t max_rounds = 0;  // rounds of pricing per thread; 0: until the time limit
  bool programs = true;    // mixed-integer programs (CBC) on thread 0; off for quick screens
  std::function<void(const SolveProgress&)> on_improvement = nullptr;
  // When set (a signal handler's flag, say), the search stops within
  // moments and the best answer so far is returned.
  const std::atomic<bool>* cancel = nullptr;
  // The process ends right after solve() (a command-line run): the solver's
  // own form of the problem, many small pieces, is left to the operating
  // system instead of being freed piece by piece (0.17 s on a 66,000-node
  // problem, past a limit that counts to the process's end). The caller
  // must exit without running the leak checker (std::_Exit).
  bool leave_memory_to_exit = false;
};

struct SolveResult {
  std::vector<int> strategy;  // per node
  __int128 cost = 0;
  int64_t peak_usage = 0;
  bool feasible = false;
  // No assignment fits (a proof, e.g. the smallest usages already overflow).
  bool proven_infeasible = false;
  // The answer is optimal (the whole problem solved exactly: CBC's proof,
  // or a tree-shaped problem whose unconstrained optimum fits); the search
  // stops as soon as it is known.
  bool proven_optimal = false;
  std::string why;  // when not feasible
  double seconds = 0;
  int64_t rounds = 0;
  int64_t work = 0;  // units (kSolverWorkPerSecond) spent, all threads together
  // Deterministic mode only: CBC hit its safety kill, so this answer may
  // differ on another run.
  bool work_guard_hit = false;
};

SolveResult solve(const ShardingProblem& problem, const SolveOptions& options = {});

}  // namespace autoshard
