// Exact improvement of part of an assignment by mixed-integer programming
// (COIN-OR CBC, from Debian's packages): the chosen variables take any
// values, the others keep theirs. The program is the local polytope of the
// pairwise costs (one binary per variable value, one continuous per edge
// entry) plus the memory limit at every time segment the free variables
// touch. Small problems are solved whole this way; large ones by
// neighbourhoods (large neighbourhood search).
#pragma once

#include <functional>
#include <vector>

#include "solver/reduced.h"

namespace autoshard::solver {

// The work of one LP iteration of CBC per program column, in the solver's
// units (an iteration on A's 52,000-column program takes about 1.5 ms).
inline constexpr int64_t kCbcWorkPerColumn = 50;

struct MipResult {
  bool improved = false;  // `s` was changed to a cheaper assignment that fits
  // The free variables' values in `s` (improved or not) are proven optimal
  // given the others: CBC's proof is kept even when it found nothing better.
  bool optimal = false;
  // Work units (kSolverWorkPerSecond) spent: kCbcWorkPerColumn per column
  // and LP iteration (one more iteration per program, for its building).
  int64_t work = 0;
  bool guard_hit = false;  // deterministic mode: the safety kill ended CBC
};

// The number of edge entries (continuous columns) the program for `free`
// would have: its size.
size_t mip_columns(const Reduced& r, const std::vector<int>& free);

// CBC runs in a child process killed after `seconds` (or as soon as `stopped`
// says so): the call returns within `seconds` plus the program's building.
// With `max_iterations` > 0 (deterministic mode) CBC is limited by its LP
// iterations (and as many nodes) instead of the clock, and killed only past
// a guard of ten times `seconds` (at least 10 s).
MipResult mip_improve(const Reduced& r, const std::vector<int>& free, std::vector<int>& s,
                      double seconds, const std::function<bool()>& stopped = nullptr,
                      int64_t max_iterations = 0);

}  // namespace autoshard::solver
