#include "autoshard/solver/screen.h"

#include "autoshard/solver/solver.h"

namespace autoshard {

namespace {

// The verdict of one search, or nullopt-like kNotFound when it found no
// answer and no proof.
Screening verdict_of(const SolveResult& r) {
  Screening s;
  if (r.feasible) {
    s.verdict = Screening::Verdict::kFits;
    s.cost = r.cost;
  } else if (r.proven_infeasible) {
    s.verdict = Screening::Verdict::kNoneFits;
    s.why = r.why;
  }
  return s;
}

}  // namespace

Screening screen_problem(const ShardingProblem& problem, uint64_t seed, double fallback_s) {
  // One round finds a plan where one exists on nearly every problem (it
  // missed 4 of 614 small random ones that brute force says fit).
  Screening s = verdict_of(
      solve(problem, {.time_limit_s = 60, .seed = seed, .max_rounds = 1, .programs = false}));
  if (s.verdict != Screening::Verdict::kNotFound || fallback_s <= 0) {
    if (s.verdict == Screening::Verdict::kNotFound)
      s.why = "no plan found in one round of the heuristics (not proven: none may fit)";
    return s;
  }
  const SolveResult r = solve(
      problem, {.time_limit_s = fallback_s, .deterministic = true, .seed = seed, .programs = true});
  s = verdict_of(r);
  if (s.verdict == Screening::Verdict::kNotFound)
    s.why = "no plan found in the screen's search (" + std::to_string(r.rounds) +
            " rounds and the programs, not a proof: one may still fit)";
  return s;
}

}  // namespace autoshard
