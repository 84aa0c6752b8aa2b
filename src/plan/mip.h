// Exact improvement of part of an assignment by mixed-integer programming
// (COIN-OR CBC, from Debian's packages): the chosen variables take any
// values, the others keep theirs. The program is the local polytope of the
// pairwise costs (one binary per variable value, one continuous per edge
// entry) plus the memory limit at every time segment the free variables
// touch. Small problems are solved whole this way; large ones by
// neighbourhoods (large neighbourhood search).
#pragma once

#include <vector>

#include "plan/reduced.h"

namespace autoshard::solver {

struct MipResult {
  bool improved = false;  // `s` was changed to a cheaper assignment that fits
  bool optimal = false;   // the free variables' values are proven optimal
};

// The number of edge entries (continuous columns) the program for `free`
// would have: its size.
size_t mip_columns(const Reduced& r, const std::vector<int>& free);

MipResult mip_improve(const Reduced& r, const std::vector<int>& free, std::vector<int>& s,
                      double seconds);

}  // namespace autoshard::solver
