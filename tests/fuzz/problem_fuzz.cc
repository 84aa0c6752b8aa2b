// libFuzzer target for IOPDDL problems (`autoshard solve`): the reader, the
// evaluator and one quick round of the solver. Any bytes give a problem or
// an autoshard::Error; any other exception, a crash, a hang, a blow-up, or
// a solver answer the evaluator disagrees with is a finding (built with
// ASan + UBSan; scripts/fuzz.sh bounds time and memory per input).
//
//   scripts/fuzz.sh [SECONDS]
#include <cstdint>
#include <string>

#include "autoshard/error.h"
#include "autoshard/solver/problem.h"
#include "autoshard/solver/solver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  autoshard::ShardingProblem p;
  try {
    p = autoshard::ShardingProblem::parse(text, "fuzz");
  } catch (const autoshard::Error&) {
    return 0;
  }
  const std::vector<int> first(p.nodes.size(), 0);
  (void)p.cost(first);
  (void)p.feasible(first);
  autoshard::SolveOptions o;
  o.time_limit_s = 0.05;
  o.max_rounds = 1;
  o.programs = false;  // CBC is not what is fuzzed here
  try {
    const autoshard::SolveResult r = autoshard::solve(p, o);
    // An answer called feasible must be, by the problem's own evaluator.
    if (r.feasible && !p.feasible(r.strategy)) __builtin_trap();
  } catch (const autoshard::Error& e) {
    // The solver's own consistency checks are findings; bad input is not.
    if (std::string(e.what()).find("internal") != std::string::npos) __builtin_trap();
  }
  return 0;
}
