// `autoshard solve PROBLEM.json`: the sharding solver on a problem in the
// IOPDDL contest's format (plain or .gz). Progress on stderr; the chosen
// strategy list as a JSON array on the last line of stdout (the contest's
// convention), the best found when time runs out (reading the problem
// counts against --time-limit; SIGTERM or SIGINT end the search early with
// the same). No answer that fits is an error, with nothing on stdout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/solver/solver.h"
#include "cli/arguments.h"
#include "cli/commands.h"

namespace autoshard::cli {

namespace {

struct SolveArgs {
  std::string problem;
  double time_limit = 60;
  int threads = 1;
  uint64_t seed = 0;
  int64_t rounds = 0;
  bool deterministic = false;
};

// Set by SIGTERM / SIGINT: the solver stops and its best answer is printed.
std::atomic<bool> terminate_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void request_stop(int) {
  terminate_requested = true;
}

void run_solve(const SolveArgs& a) {
  // --time-limit counts from here: reading a huge problem is part of it.
  const auto start = std::chrono::steady_clock::now();
  const ShardingProblem p = ShardingProblem::read(a.problem);
  const double reading_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "problem '%s': %zu nodes, %zu edges, usage limit %s\n", p.name.c_str(),
               p.nodes.size(), p.edges.size(),
               p.usage_limit ? std::to_string(*p.usage_limit).c_str() : "none");
  SolveOptions o;
  o.time_limit_s = std::max(0.0, a.time_limit - reading_s);
  o.threads = a.threads;
  o.seed = a.seed;
  o.max_rounds = a.rounds;
  // Deterministic: the whole --time-limit in work (reading a file takes
  // different times on different machines).
  o.deterministic = a.deterministic;
  if (a.deterministic) o.time_limit_s = a.time_limit;
  o.cancel = &terminate_requested;
  std::signal(SIGTERM, request_stop);
  std::signal(SIGINT, request_stop);
  o.on_improvement = [](const SolveProgress& g) {
    std::fprintf(stderr, "%9.3f s  cost %s  peak usage %lld\n", g.seconds,
                 to_string(g.cost).c_str(), static_cast<long long>(g.peak_usage));
  };
  const SolveResult r = solve(p, o);
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  // Without an answer that fits, nothing goes to stdout: a placeholder
  // would read as a solution.
  AS_CHECK(!r.proven_infeasible, "problem '", a.problem, "' is infeasible: ", r.why);
  AS_CHECK(r.feasible, "problem '", a.problem, "': ", r.why, " (reading took ", reading_s, " s)");
  std::fprintf(stderr, "best: cost %s, peak usage %lld, %.2f s, %lld rounds, %.3g work%s\n",
               to_string(r.cost).c_str(), static_cast<long long>(r.peak_usage), r.seconds,
               static_cast<long long>(r.rounds), double(r.work),
               r.proven_optimal ? " (proven optimal)" : "");
  if (r.work_guard_hit)
    std::fprintf(stderr,
                 "warning: CBC ran past its guard (ten times its share) and was stopped; this "
                 "answer may differ on another run\n");
  std::printf("%s\n", nlohmann::json(r.strategy).dump().c_str());
}

}  // namespace

void add_solve_command(CLI::App& app) {
  auto a = std::make_shared<SolveArgs>();
  CLI::App* cmd = app.add_subcommand(
      "solve", "solve a sharding problem in the IOPDDL format (plain or .gz): strategies as JSON");
  cmd->add_option("PROBLEM", a->problem, "problem file (.json or .json.gz)")->required();
  add_real(cmd, "--time-limit", a->time_limit, 0, 1e7, true, "seconds to search");
  add_int(cmd, "--threads", a->threads, 1, 256, "independent searches in parallel");
  add_seed(cmd, "--seed", a->seed, "seed of the search (with --rounds: a deterministic answer)");
  add_int(cmd, "--rounds", a->rounds, 0, int64_t{1} << 40,
          "rounds of pricing per thread (0: until the time limit)");
  cmd->add_flag("--deterministic", a->deterministic,
                "count --time-limit in work, not seconds: the same answer on every run and "
                "machine for a seed (about the same time on a 2-core machine; docs/planner.md)");
  cmd->callback([a] { run_solve(*a); });
}

}  // namespace autoshard::cli
