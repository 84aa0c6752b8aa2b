#include "solver/mip.h"

#include <coin/Cbc_C_Interface.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>

namespace autoshard::solver {

namespace {

// The memory used at each segment by the variables that stay fixed.
std::vector<int64_t> fixed_usage(const Reduced& r, const std::vector<char>& is_free,
                                 const std::vector<int>& s) {
  std::vector<int64_t> delta(r.segments + 1, 0);
  for (int v = 0; v < r.vars; ++v) {
    if (is_free[v]) continue;
    for (const MemTerm& m : r.mem[v]) delta[m.lo] += m.usage[s[v]], delta[m.hi] -= m.usage[s[v]];
  }
  std::vector<int64_t> used(r.segments);
  int64_t cur = 0;
  for (int t = 0; t < r.segments; ++t) used[t] = (cur += delta[t]) + r.base[t];
  return used;
}

// A sparse program built column by column.
struct Program {
  std::vector<double> obj, lb, ub;
  std::vector<char> integer;
  std::vector<std::vector<std::pair<int, double>>> cols;  // (row, coefficient)
  std::vector<double> row_lb, row_ub;
  int add_row(double lo, double hi) {
    row_lb.push_back(lo), row_ub.push_back(hi);
    return static_cast<int>(row_lb.size()) - 1;
  }
  int add_col(double cost, bool is_integer) {
    obj.push_back(cost), lb.push_back(0), ub.push_back(1), integer.push_back(is_integer);
    cols.emplace_back();
    return static_cast<int>(obj.size()) - 1;
  }
};

}  // namespace

size_t mip_columns(const Reduced& r, const std::vector<int>& free) {
  std::vector<char> is_free(r.vars, 0);
  for (int v : free) is_free[v] = 1;
  size_t count = 0;
  for (int v : free) {
    count += r.dom(v);
    for (const Neighbor& nb : r.adj[v])
      if (is_free[nb.var] && nb.row) count += size_t(r.dom(v)) * r.dom(nb.var);
  }
  return count;
}

namespace {

// What CBC reports back from its process.
struct CbcOutcome {
  bool finished = false;       // it answered before the deadline
  bool proven = false;         // its answer is proven optimal
  bool have_solution = false;  // it has an integer solution
  double objective = 0;
  int64_t iterations = 0;  // LP iterations it made
  bool killed = false;     // the deadline (or `stopped`) ended it
};

// Writes all of `bytes` to `fd` (a pipe), retrying on interruption.
bool write_all(int fd, const void* bytes, size_t n) {
  const char* b = static_cast<const char*>(bytes);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    b += w, n -= size_t(w);
  }
  return true;
}

// CBC in the child: solve, send the outcome and each free variable's value.
[[noreturn]] void cbc_child(int fd, const Program& p, const std::vector<int>& start,
                            const std::vector<int>& index, const std::vector<double>& value,
                            const std::vector<int>& s, const std::vector<int>& free,
                            const std::vector<std::vector<int>>& x, const Reduced& r,
                            double seconds, int64_t max_iterations) {
  // CBC's prints (and a flush of stdio buffers copied from the parent)
  // must not reach the parent's output.
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) ::dup2(null, 1), ::dup2(null, 2);
  Cbc_Model* m = Cbc_newModel();
  Cbc_setLogLevel(m, 0);
  Cbc_loadProblem(m, static_cast<int>(p.obj.size()), static_cast<int>(p.row_lb.size()),
                  start.data(), index.data(), value.data(), p.lb.data(), p.ub.data(), p.obj.data(),
                  p.row_lb.data(), p.row_ub.data());
  for (size_t c = 0; c < p.integer.size(); ++c)
    if (p.integer[c]) Cbc_setInteger(m, static_cast<int>(c));
  Cbc_setParameter(m, "timeMode", "elapsed");
  // CBC 2.10 crashes when its time limit lands in preprocessing; the
  // programs here are small, so go without it.
  Cbc_setParameter(m, "preprocess", "off");
  // Costs are integers: a gap under 1 is a proof (no relative gap).
  Cbc_setAllowableGap(m, 0.5);
  Cbc_setAllowableFractionGap(m, 0);
  // Deterministic mode: an iteration limit and no clock (CBC runs one thread, so
  // its search is the same on every run).
  if (max_iterations > 0) {
    // LP iterations bound the root's work too (its cuts are not nodes);
    // every node takes at least one.
    const int64_t limit = std::min<int64_t>(max_iterations, 1 << 30);
    Cbc_setMaximumNodes(m, static_cast<int>(limit));
    Cbc_setParameter(m, "maxIterations", std::to_string(limit).c_str());
  } else {
    Cbc_setMaximumSeconds(m, seconds);
  }
  std::vector<int> idx;
  std::vector<double> val;
  for (size_t f = 0; f < free.size(); ++f)
    for (int j = 0; j < r.dom(free[f]); ++j)
      if (x[f][j] >= 0) idx.push_back(x[f][j]), val.push_back(j == s[free[f]] ? 1.0 : 0.0);
  Cbc_setMIPStartI(m, static_cast<int>(idx.size()), idx.data(), val.data());
  Cbc_solve(m);
  const double* sol = Cbc_getColSolution(m);
  const int32_t head[3] = {Cbc_isProvenOptimal(m) != 0,
                           sol != nullptr && Cbc_numberSavedSolutions(m) > 0,
                           Cbc_getIterationCount(m)};
  const double objective = Cbc_getObjValue(m);
  std::vector<int32_t> values(free.size(), 0);
  for (size_t f = 0; head[1] && f < free.size(); ++f) {
    double best = -1;
    for (int j = 0; j < r.dom(free[f]); ++j)
      if (x[f][j] >= 0 && sol[x[f][j]] > best) best = sol[x[f][j]], values[f] = j;
  }
  const bool ok = write_all(fd, head, sizeof head) && write_all(fd, &objective, sizeof objective) &&
                  write_all(fd, values.data(), values.size() * sizeof(int32_t));
  ::_exit(ok ? 0 : 1);
}

// Runs CBC in a child process and kills it at `deadline`: CBC's own limit
// overshoots (by seconds on programs of tens of thousands of columns), and
// a process is the one thing that stops it at once. CBC is asked to stop at
// half of the time left, so it usually answers by itself with its best solution
// (its overshoot on the IOPDDL problems: G 1.8 s past its limit of 3.9 s, A
// 3.3 s past 4.8 s). The child also keeps
// CBC's global state (its command-line driver's) out of this process, so
// threads may solve programs at once. No process (fork refused): no answer.
CbcOutcome run_cbc(const Program& p, const std::vector<int>& start, const std::vector<int>& index,
                   const std::vector<double>& value, const std::vector<int>& s,
                   const std::vector<int>& free, const std::vector<std::vector<int>>& x,
                   const Reduced& r, std::chrono::steady_clock::time_point deadline,
                   const std::function<bool()>& stopped, int64_t max_iterations,
                   std::vector<int>& values) {
  CbcOutcome out;
  // Building the program took some of the time: CBC gets what is left.
  const double seconds =
      std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  if (seconds <= 0.01) return out;
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return out;
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    ::close(fds[0]), ::close(fds[1]);
    return out;
  }
  if (child == 0) {
    // Killed with this process too (a SIGKILL gives no chance to kill it).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::close(fds[0]);
    cbc_child(fds[1], p, start, index, value, s, free, x, r, 0.5 * seconds, max_iterations);
  }
  ::close(fds[1]);
  std::vector<char> bytes;
  const size_t expected = 3 * sizeof(int32_t) + sizeof(double) + free.size() * sizeof(int32_t);
  char buffer[65536];
  bool eof = false;
  while (!eof && bytes.size() < expected) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0 || (stopped && stopped())) break;
    pollfd pfd{fds[0], POLLIN, 0};
    // In slices of 50 ms, to see `stopped` (a signal, another thread's proof).
    const int ready = ::poll(&pfd, 1, static_cast<int>(std::ceil(std::min(left, 0.05) * 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (ready == 0) continue;
    const ssize_t n = ::read(fds[0], buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      eof = true;
    else
      bytes.insert(bytes.end(), buffer, buffer + n);
  }
  ::close(fds[0]);
  ::kill(child, SIGKILL);  // done already, or past the deadline
  while (::waitpid(child, nullptr, 0) < 0 && errno == EINTR) {
  }
  if (bytes.size() != expected) {
    out.killed = !eof;
    return out;
  }
  int32_t head[3];
  std::memcpy(head, bytes.data(), sizeof head);
  std::memcpy(&out.objective, bytes.data() + sizeof head, sizeof(double));
  const char* rest = bytes.data() + sizeof head + sizeof(double);
  values.resize(free.size());
  for (size_t f = 0; f < free.size(); ++f) {
    int32_t v;
    std::memcpy(&v, rest + f * sizeof v, sizeof v);
    values[f] = v;
  }
  out.finished = true;
  out.proven = head[0] != 0;
  out.have_solution = head[1] != 0;
  out.iterations = head[2];
  return out;
}

// Builds and solves the program over `free` with memory rows at `segments`;
// returns the free variables' values (empty when nothing better was found).
std::vector<int> solve_program(const Reduced& r, const std::vector<int>& free,
                               const std::vector<int>& s, const std::vector<int>& segments,
                               std::chrono::steady_clock::time_point deadline,
                               const std::function<bool()>& stopped, int64_t max_iterations,
                               bool& optimal, bool& proved_current, MipResult& account) {
  std::vector<char> is_free(r.vars, 0);
  for (int v : free) is_free[v] = 1;
  Program p;
  std::map<int, int> slot;  // free variable -> its index in `free`
  std::vector<std::vector<int>> x(free.size());
  double current = 0;  // the cost of the free part now
  for (size_t f = 0; f < free.size(); ++f) {
    const int v = free[f];
    slot[v] = static_cast<int>(f);
    const int one = p.add_row(1, 1);
    x[f].assign(r.dom(v), -1);
    for (int j = 0; j < r.dom(v); ++j) {
      int64_t c = r.cost[v][j];
      for (const Neighbor& nb : r.adj[v])
        if (!is_free[nb.var]) c = sat_add(c, r.edge_cost(nb, j, s[nb.var]));
      if (c >= kInf) continue;
      x[f][j] = p.add_col(double(c), true);
      p.cols[x[f][j]].push_back({one, 1.0});
      if (j == s[v]) current += double(c);
    }
    if (x[f][s[v]] < 0) return {};
  }
  for (size_t f = 0; f < free.size(); ++f) {
    const int v = free[f];
    for (const Neighbor& nb : r.adj[v]) {
      if (!is_free[nb.var] || !nb.row) continue;
      const int g = slot[nb.var];
      std::vector<int> row_of(r.dom(v)), col_of(r.dom(nb.var));
      for (int a = 0; a < r.dom(v); ++a) {
        row_of[a] = p.add_row(0, 0);
        if (x[f][a] >= 0) p.cols[x[f][a]].push_back({row_of[a], -1.0});
      }
      for (int b = 0; b < r.dom(nb.var); ++b) {
        col_of[b] = p.add_row(0, 0);
        if (x[g][b] >= 0) p.cols[x[g][b]].push_back({col_of[b], -1.0});
      }
      for (int a = 0; a < r.dom(v); ++a)
        for (int b = 0; b < r.dom(nb.var); ++b) {
          const int64_t c = r.edge_cost(nb, a, b);
          if (c >= kInf || x[f][a] < 0 || x[g][b] < 0) continue;
          const int y = p.add_col(double(c), false);
          p.cols[y].push_back({row_of[a], 1.0});
          p.cols[y].push_back({col_of[b], 1.0});
        }
      current += double(r.edge_cost(nb, s[v], s[nb.var]));
    }
  }
  if (r.limit < kInf && !segments.empty()) {
    const std::vector<int64_t> used = fixed_usage(r, is_free, s);
    for (int t : segments) {
      std::map<int, double> coef;  // x column -> usage at t
      for (size_t f = 0; f < free.size(); ++f)
        for (const MemTerm& m : r.mem[free[f]]) {
          if (t < m.lo || t >= m.hi) continue;
          for (int j = 0; j < r.dom(free[f]); ++j)
            if (x[f][j] >= 0 && m.usage[j] != 0) coef[x[f][j]] += double(m.usage[j]);
        }
      if (coef.empty()) continue;
      const int row = p.add_row(-1e30, double(r.limit - used[t]));
      for (auto [c, u] : coef) p.cols[c].push_back({row, u});
    }
  }
  std::vector<int> start{0}, index;
  std::vector<double> value;
  for (const auto& col : p.cols) {
    for (auto [row, a] : col) index.push_back(row), value.push_back(a);
    start.push_back(static_cast<int>(index.size()));
  }
  // Freed here, not after CBC stops at the deadline: a neighbourhood of
  // 100,000 columns took 86 ms to free, past the limit.
  decltype(p.cols)().swap(p.cols);
  std::vector<int> values;
  const CbcOutcome out =
      run_cbc(p, start, index, value, s, free, x, r, deadline, stopped, max_iterations, values);
  account.work += kCbcWorkPerColumn * int64_t(p.obj.size()) * (1 + out.iterations);
  if (out.killed && max_iterations > 0 && !(stopped && stopped())) account.guard_hit = true;
  if (!out.finished) return {};
  // Proven optimal at or above the current cost: this program (whose memory
  // rows are a subset of the true ones) cannot do better, so neither can
  // the true problem over these variables; the current values are optimal.
  if (out.proven && out.objective >= current - 0.5) proved_current = true;
  if (!out.have_solution || out.objective >= current - 0.5) return {};
  optimal = out.proven;
  return values;
}

std::vector<int64_t> profile_of(const Reduced& r, const std::vector<int>& s) {
  std::vector<int64_t> delta(r.segments + 1, 0);
  for (int v = 0; v < r.vars; ++v)
    for (const MemTerm& m : r.mem[v]) delta[m.lo] += m.usage[s[v]], delta[m.hi] -= m.usage[s[v]];
  std::vector<int64_t> profile(r.segments);
  int64_t cur = 0;
  for (int t = 0; t < r.segments; ++t) profile[t] = (cur += delta[t]) + r.base[t];
  return profile;
}

// The `count` segments with the least room, among those the free
// variables' memory touches and not yet in `have`.
std::vector<int> tightest(const Reduced& r, const std::vector<int>& free,
                          const std::vector<int64_t>& profile, const std::vector<int>& have,
                          size_t count, bool only_over) {
  std::vector<char> touched(r.segments, 0);
  for (int v : free)
    for (const MemTerm& m : r.mem[v])
      for (int t = m.lo; t < m.hi; ++t) touched[t] = 1;
  for (int t : have) touched[t] = 0;
  std::vector<int> candidates;
  for (int t = 0; t < r.segments; ++t)
    if (touched[t] && (!only_over || profile[t] > r.limit)) candidates.push_back(t);
  std::sort(candidates.begin(), candidates.end(),
            [&](int a, int b) { return profile[a] > profile[b]; });
  if (candidates.size() > count) candidates.resize(count);
  return candidates;
}

}  // namespace

// Memory rows are added lazily: first at the tightest segments of the
// current assignment, then wherever the program's answer overflows, until
// it fits (a handful of rounds: few segments ever bind).
MipResult mip_improve(const Reduced& r, const std::vector<int>& free, std::vector<int>& s,
                      double seconds, const std::function<bool()>& stopped,
                      int64_t max_iterations) {
  MipResult result;
  if (free.empty() || seconds <= 0) return result;
  const auto start = std::chrono::steady_clock::now();
  // Deterministic mode reads the clock only for the guard against a hang.
  const double guard = max_iterations > 0 ? std::max(10.0, 10 * seconds) : seconds;
  std::vector<int> segments;
  if (r.limit < kInf) segments = tightest(r, free, profile_of(r, s), {}, 24, false);
  for (int attempt = 0; attempt < 8; ++attempt) {
    const double left =
        guard - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if ((max_iterations == 0 && left <= 0.02) || (stopped && stopped()) || result.guard_hit) break;
    bool optimal = false, proved_current = false;
    const std::vector<int> values =
        solve_program(r, free, s, segments,
                      start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(guard)),
                      stopped, max_iterations, optimal, proved_current, result);
    if (proved_current) result.optimal = true;  // nothing better exists: `s` stays
    if (values.empty()) break;
    std::vector<int> trial = s;
    for (size_t f = 0; f < free.size(); ++f) trial[free[f]] = values[f];
    const std::vector<int64_t> profile = profile_of(r, trial);
    const std::vector<int> over =
        r.limit < kInf ? tightest(r, free, profile, segments, 16, true) : std::vector<int>{};
    if (over.empty()) {
      s = trial;
      result.improved = true;
      result.optimal = optimal;
      break;
    }
    segments.insert(segments.end(), over.begin(), over.end());
  }
  return result;
}

}  // namespace autoshard::solver
