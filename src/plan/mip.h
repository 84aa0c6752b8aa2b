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

#include "plan/reduced.h"

namespace autoshard::solver {

struct MipResult {
  bool improved = false;  // `s` was changed to a cheaper assignment that fits
  // The free variables' values in `s` (improved or not) are proven optimal
  // given the others: CBC's proof is kept even when it found nothing better.
  bool optimal = false;
};

// The number of edge entries (continuous columns) the program for `free`
// would have: its size.
size_t mip_columns(const Reduced& r, const std::vector<int>& free);

// CBC runs in a child process killed after `seconds` (or as soon as `stopped`
// says so): the call returns within `seconds` plus the program's building.
MipResult mip_improve(const Reduced& r, const std::vector<int>& free, std::vector<int>& s,
                      double seconds, const std::function<bool()>& stopped = nullptr);

}  // namespace autoshard::solver
