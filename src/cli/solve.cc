// `autoshard solve PROBLEM.json`: the sharding solver on a problem in the
// IOPDDL contest's format (plain or .gz). Progress on stderr; the chosen
// strategy list as a JSON array on the last line of stdout (the contest's
// convention), the best found when time runs out (--time-limit is wall time
// from the start of the process: loading the program, reading the problem
// and writing the answer count; SIGTERM or SIGINT end the search early with
// the same). No answer that fits is an error, with nothing on stdout.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

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
  std::string evaluate;  // an answer file to check instead of solving
};

// Set by SIGTERM / SIGINT: the solver stops and its best answer is printed.
std::atomic<bool> terminate_requested{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void request_stop(int) {
  terminate_requested = true;
}

// Seconds since this process started (the kernel's record, so the dynamic
// loading of the program and a BLAS restart count), to a clock tick; 0
// where /proc cannot say.
double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  std::getline(stat, line);
  // Field 22, start time in clock ticks after boot, counted after the
  // command name, which is in parentheses and may hold spaces.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
  }
  timespec now{};
  if (field.empty() || ::clock_gettime(CLOCK_BOOTTIME, &now) != 0) return 0;
  const double started = std::stod(field) / double(::sysconf(_SC_CLK_TCK));
  return std::max(0.0, double(now.tv_sec) + now.tv_nsec * 1e-9 - started);
}

// Time kept back from the search for the threads' last steps, the answer's
// check and printing (nothing is freed: the process ends with std::_Exit):
// 50-80 ms from the search's deadline to the process's end on 120-190 MB
// problems on the 2-core VM, within 1% of a 10 s limit.
constexpr double kLeavingSeconds = 0.04;

void run_solve(const SolveArgs& a) {
  const auto start = std::chrono::steady_clock::now();
  const double before_start_s = seconds_since_process_start();
  const ShardingProblem p = ShardingProblem::read(a.problem);
  const double reading_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "problem '%s': %zu nodes, %zu edges, usage limit %s\n", p.name.c_str(),
               p.nodes.size(), p.edges.size(),
               p.usage_limit ? std::to_string(*p.usage_limit).c_str() : "none");
  if (!a.deterministic)
    std::fprintf(stderr,
                 "search time %.3f s of --time-limit %g s (%.3f s went to starting and reading)\n",
                 std::max(0.0, a.time_limit - before_start_s - reading_s - kLeavingSeconds),
                 a.time_limit, before_start_s + reading_s);
  SolveOptions o;
  o.time_limit_s = std::max(0.0, a.time_limit - before_start_s - reading_s - kLeavingSeconds);
  o.threads = a.threads;
  o.seed = a.seed;
  o.max_rounds = a.rounds;
  // Deterministic: the whole --time-limit in work (loading and reading take
  // different times on different machines).
  o.deterministic = a.deterministic;
  if (a.deterministic) o.time_limit_s = a.time_limit;
  o.cancel = &terminate_requested;
  o.leave_memory_to_exit = true;
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
  // The limit counts to the process's end: the problem's pieces (0.4 s to
  // free on a 140 MB problem) and the solver's go back to the system at once.
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(0);
}

// `--evaluate FILE`: another solver's answer checked against the problem
// (bench/problem_set.sh compares other solvers with it). The answer is the
// last non-empty line of FILE, a JSON array of one strategy per node, as
// the contest's solvers print it. Prints one JSON object: the cost, the
// peak usage, the limit, and whether it fits without a forbidden choice.
void run_evaluate(const SolveArgs& a) {
  const ShardingProblem p = ShardingProblem::read(a.problem);
  std::ifstream in(a.evaluate);
  AS_CHECK(in.good(), "cannot read the answer file '", a.evaluate, "'");
  std::string line, last;
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  const nlohmann::json answer = nlohmann::json::parse(last, nullptr, false);
  AS_CHECK(answer.is_array() && std::all_of(answer.begin(), answer.end(),
                                            [](const auto& v) { return v.is_number_integer(); }),
           "the answer file '", a.evaluate,
           "' must end with a JSON array of strategy indices, one per node; its last line is '",
           last.substr(0, 80), "'");
  std::vector<int64_t> wide = answer.get<std::vector<int64_t>>();
  AS_CHECK(wide.size() == p.nodes.size(), "the answer in '", a.evaluate, "' has ", wide.size(),
           " strategies for the problem's ", p.nodes.size(), " nodes");
  std::vector<int> strategy(wide.size());
  for (size_t i = 0; i < wide.size(); ++i) {
    AS_CHECK(wide[i] >= 0 && wide[i] < int64_t(p.nodes[i].cost.size()), "the answer in '",
             a.evaluate, "' gives node ", i, " strategy ", wide[i], "; it has ",
             p.nodes[i].cost.size());
    strategy[i] = static_cast<int>(wide[i]);
  }
  // Raw numbers: a cost past 64 bits (forbidden choices) stays exact.
  std::printf("{\"cost\": %s, \"peak_usage\": %s, \"usage_limit\": %s, \"feasible\": %s}\n",
              to_string(p.cost(strategy)).c_str(), to_string(p.exact_peak_usage(strategy)).c_str(),
              p.usage_limit ? std::to_string(*p.usage_limit).c_str() : "null",
              p.feasible(strategy) ? "true" : "false");
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
  cmd->add_option("--evaluate", a->evaluate,
                  "check another solver's answer (the last line of FILE, a JSON array) instead "
                  "of solving: prints its cost, peak usage and whether it fits");
  cmd->callback([a] { a->evaluate.empty() ? run_solve(*a) : run_evaluate(*a); });
}

}  // namespace autoshard::cli
