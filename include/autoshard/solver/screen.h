// The mesh screen's verdict on one mesh's problem (AutoShard::
// plan_for_devices screens every mesh shape before planning the best in
// full): a quick search that tells "a plan fits, at about this cost" from
// "no plan fits" (a proof) and from "none found in the time given" (no
// proof either way), so a mesh is never rejected on a heuristic's failure.
#pragma once

#include <cstdint>
#include <string>

#include "autoshard/solver/problem.h"

namespace autoshard {

struct Screening {
  enum class Verdict {
    kFits,      // a feasible answer was found: `cost` is its cost
    kNoneFits,  // proven: no assignment fits the memory limit
    kNotFound,  // none found within the screen's work, none proven either
  };
  Verdict verdict = Verdict::kNotFound;
  __int128 cost = 0;
  std::string why;  // kNoneFits: the proof; kNotFound: what was tried
};

// One round of the heuristics (no CBC: quick, and no clock involved); when
// it finds nothing and proves nothing, a longer search with the programs
// (CBC), limited in work (SolveOptions::deterministic, `fallback_s` seconds'
// worth), so the verdict is the same on every run. Both searches take `seed`.
Screening screen_problem(const ShardingProblem& problem, uint64_t seed, double fallback_s = 1);

}  // namespace autoshard
