#include "autoshard/solver/solver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <thread>

#include "autoshard/error.h"
#include "solver/max_tree.h"
#include "solver/mip.h"
#include "solver/prices.h"
#include "solver/reduced.h"

namespace autoshard {
namespace {

using Clock = std::chrono::steady_clock;
using namespace solver;

// ---- tree-shaped parts: eliminated exactly ----

// Variables of degree <= 1 are eliminated one after another (leaves, then
// the branches they hang from); what stays is the core.
struct Peeling {
  std::vector<int> order;
  std::vector<int> parent, parent_edge;  // per variable (-1: a whole tree's root)
  std::vector<bool> core;
  std::vector<int> core_vars;
  std::vector<std::vector<int>> core_adj;  // indices into adj of core neighbours
};

Peeling peel(const Reduced& r) {
  Peeling p;
  p.parent.assign(r.vars, -1);
  p.parent_edge.assign(r.vars, -1);
  p.core.assign(r.vars, true);
  std::vector<int> degree(r.vars), stack;
  for (int v = 0; v < r.vars; ++v) {
    degree[v] = static_cast<int>(r.adj[v].size());
    if (degree[v] <= 1) stack.push_back(v);
  }
  while (!stack.empty()) {
    const int u = stack.back();
    stack.pop_back();
    if (!p.core[u] || degree[u] > 1) continue;
    p.core[u] = false;
    p.order.push_back(u);
    for (size_t e = 0; e < r.adj[u].size(); ++e) {
      const int v = r.adj[u][e].var;
      if (!p.core[v]) continue;
      p.parent[u] = v;
      p.parent_edge[u] = static_cast<int>(e);
      if (--degree[v] <= 1) stack.push_back(v);
    }
  }
  p.core_adj.resize(r.vars);
  for (int v = 0; v < r.vars; ++v) {
    if (!p.core[v]) continue;
    p.core_vars.push_back(v);
    for (size_t e = 0; e < r.adj[v].size(); ++e)
      if (p.core[r.adj[v][e].var]) p.core_adj[v].push_back(static_cast<int>(e));
  }
  return p;
}

double value_of(int64_t c) {
  return c >= kInf ? 1e30 : double(c);
}

// ---- one search (one thread) ----

class Search {
 public:
  Search(const Reduced& r, const Peeling& peel, uint64_t seed, int thread,
         const std::atomic<bool>* stop, const std::atomic<bool>* cancel, int64_t work_limit)
      : r_(r),
        stop_(stop),
        cancel_(cancel),
        work_limit_(work_limit),
        peel_(peel),
        rng_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull * (thread + 1)),
        price_rule_(thread % 2 == 0 ? PriceRule::kPerByte : PriceRule::kFlat),
        prices_(r.segments, 0.0),
        tree_(r.segments) {}

  // One round: solve with the current memory prices, make that answer fit
  // and improve it, then step the prices from the memory the priced answer
  // used and the best answer so far.
  bool round(std::vector<int>& s, __int128& cost, int64_t& peak, const Clock::time_point deadline) {
    deadline_ = deadline;
    const auto t0 = Clock::now();
    priced_solve(s);
    // Without a core and without prices, the priced solve is the exact
    // optimum without the memory limit: a lower bound on every answer.
    if (peel_.core_vars.empty() && !lower_bound_ &&
        std::all_of(prices_.begin(), prices_.end(), [](double p) { return p == 0; }))
      lower_bound_ = true_cost(s);
    const auto t1 = Clock::now();
    const std::vector<int64_t> priced_profile = usage_profile(s);
    const __int128 priced_cost = true_cost(s);
    if (!repair(s)) {
      update_prices(priced_profile, priced_cost, best_cost_);
      return false;
    }
    const auto t2 = Clock::now();
    improve(s);
    polish(s);
    if (pair_moves(s)) improve(s);
    if (use_mip_) mip_step(s);
    const auto t3 = Clock::now();
    if (std::getenv("SOLVER_DEBUG"))
      fprintf(stderr,
              "round: priced %.2f s (cost %.6g, peak %.4f of the limit), repair %.2f s, "
              "improve %.2f s\n",
              std::chrono::duration<double>(t1 - t0).count(), double(priced_cost),
              double(*std::max_element(priced_profile.begin(), priced_profile.end())) /
                  double(std::max<int64_t>(1, r_.limit)),
              std::chrono::duration<double>(t2 - t1).count(),
              std::chrono::duration<double>(t3 - t2).count());
    cost = true_cost(s);
    peak = tree_.max();
    if (!best_cost_ || cost < *best_cost_) best_cost_ = cost;
    update_prices(priced_profile, priced_cost, best_cost_);
    if (lower_bound_ && cost <= *lower_bound_) proven_optimal_ = true;
    return true;
  }

 private:
  // Time is up, or another thread proved its answer optimal, or the caller
  // asked to stop: every loop of a round checks this, so a round ends soon
  // after the deadline however large the problem.
  bool stopped() const { return (stop_ && *stop_) || (cancel_ && *cancel_); }
  bool late() const {
    return stopped() || (deterministic() ? work_ > work_limit_ : Clock::now() > deadline_);
  }
  bool deterministic() const { return work_limit_ > 0; }
  // Seconds left of the limit: on the clock, or the work left at
  // kSolverWorkPerSecond (deterministic mode).
  double seconds_left() const {
    if (deterministic()) return double(work_limit_ - work_) / kSolverWorkPerSecond;
    return std::chrono::duration<double>(deadline_ - Clock::now()).count();
  }

 public:
  bool out_of_work() const { return work_ > work_limit_; }
  int64_t work() const { return work_; }
  bool guard_hit() const { return guard_hit_; }

 private:
  // ---- the priced problem ----

  void priced_solve(std::vector<int>& s) {
    std::vector<double> prefix(r_.segments + 1, 0.0);
    for (int t = 0; t < r_.segments; ++t) prefix[t + 1] = prefix[t] + prices_[t];
    total_.assign(r_.vars, {});
    for (int v = 0; v < r_.vars; ++v) {
      work_ += r_.dom(v) * int64_t(1 + r_.mem[v].size());
      total_[v].resize(r_.dom(v));
      for (int x = 0; x < r_.dom(v); ++x) total_[v][x] = value_of(r_.cost[v][x]);
      for (const MemTerm& m : r_.mem[v]) {
        const double price = prefix[m.hi] - prefix[m.lo];
        if (price != 0)
          for (int x = 0; x < r_.dom(v); ++x) total_[v][x] += double(m.usage[x]) * price;
      }
    }
    // Messages up the eliminated trees.
    choice_.assign(r_.vars, {});
    for (int u : peel_.order) {
      const int p = peel_.parent[u];
      if (p < 0) continue;
      send_up(r_.adj[u][peel_.parent_edge[u]], total_[u], total_[p], choice_[u]);
    }
    if (s.size() != size_t(r_.vars)) {
      s.assign(r_.vars, 0);
      for (int v : peel_.core_vars) s[v] = best_alone(v);
    }
    // Belief propagation (warm: its messages carry over from the last
    // round, whose prices were close) gives a fresh start; the previous
    // answer is the other. Both descend; the lower is kept.
    std::vector<int> fresh = s;
    belief_propagation(fresh, rounds_ == 0 ? 10 : 6);
    core_descent(s);
    core_descent(fresh);
    const int patience = rounds_ == 0 ? 200 : 120;
    tree_descent(fresh, patience);
    if (core_objective(fresh) < core_objective(s)) {
      s = fresh;
    } else {
      tree_descent(s, patience);
    }
    ++rounds_;
    for (auto it = peel_.order.rbegin(); it != peel_.order.rend(); ++it) {
      const int u = *it, p = peel_.parent[u];
      s[u] = p >= 0 ? choice_[u][s[p]]
                    : int(std::min_element(total_[u].begin(), total_[u].end()) - total_[u].begin());
    }
  }

  // A tree child's message to its parent over edge `nb` (the child's side):
  // for each parent value k, adds min over x of child[x] + cost(x, k) to
  // parent[k] and keeps in arg[k] the first x that gives it. The matrix is
  // walked along its rows whichever end the child is: this is the hot loop
  // of the exact tree solves.
  void send_up(const Neighbor& nb, const std::vector<double>& child, std::vector<double>& parent,
               std::vector<int>& arg) {
    const int dx = int(child.size()), dk = int(parent.size());
    work_ += int64_t(dx) * dk;
    const int64_t* cost = r_.edges[nb.edge].c.data();
    arg.assign(dk, 0);
    if (nb.row) {  // dx x dk
      best_.assign(dk, 1e300);
      for (int x = 0; x < dx; ++x) {
        const int64_t* row = cost + size_t(x) * dk;
        for (int k = 0; k < dk; ++k) {
          const double c = child[x] + value_of(row[k]);
          if (c < best_[k]) best_[k] = c, arg[k] = x;
        }
      }
      for (int k = 0; k < dk; ++k) parent[k] += best_[k];
      return;
    }
    for (int k = 0; k < dk; ++k) {  // dk x dx
      const int64_t* row = cost + size_t(k) * dx;
      double best = 1e300;
      for (int x = 0; x < dx; ++x) {
        const double c = child[x] + value_of(row[x]);
        if (c < best) best = c, arg[k] = x;
      }
      parent[k] += best;
    }
  }

  double core_objective(const std::vector<int>& s) const {
    double total = 0;
    for (int v : peel_.core_vars) {
      total += total_[v][s[v]];
      for (int e : peel_.core_adj[v]) {
        const Neighbor& nb = r_.adj[v][e];
        if (nb.row) total += value_of(r_.edge_cost(nb, s[v], s[nb.var]));
      }
    }
    return total;
  }

  // Min-sum loopy belief propagation over the core (damped), then each
  // variable's best belief.
  void belief_propagation(std::vector<int>& s, int sweeps) {
    const std::vector<int>& core = peel_.core_vars;
    // msg[v][e]: the message from neighbour adj[v][e] into v, per value of v.
    std::vector<std::vector<std::vector<double>>>& msg = messages_;
    if (msg.empty()) {
      msg.resize(r_.vars);
      for (int v : core) {
        msg[v].resize(r_.adj[v].size());
        for (int e : peel_.core_adj[v]) msg[v][e].assign(r_.dom(v), 0.0);
      }
    }
    std::vector<int> order = core;
    std::vector<double> belief, out;
    for (int sweep = 0; sweep < sweeps && !late(); ++sweep) {
      std::shuffle(order.begin(), order.end(), rng_);
      for (int u : order) {
        belief.assign(total_[u].begin(), total_[u].end());
        for (int e : peel_.core_adj[u])
          for (int x = 0; x < r_.dom(u); ++x) belief[x] += msg[u][e][x];
        for (int e : peel_.core_adj[u]) {
          const Neighbor& nb = r_.adj[u][e];
          const int v = nb.var;
          // the slot in v's messages that comes from u
          int back = -1;
          for (int f : peel_.core_adj[v])
            if (r_.adj[v][f].var == u) back = f;
          out.assign(r_.dom(v), 1e300);
          work_ += int64_t(r_.dom(u)) * r_.dom(v);
          for (int x = 0; x < r_.dom(u); ++x) {
            const double base = belief[x] - msg[u][e][x];
            for (int y = 0; y < r_.dom(v); ++y)
              out[y] = std::min(out[y], base + value_of(r_.edge_cost(nb, x, y)));
          }
          const double lowest = *std::min_element(out.begin(), out.end());
          std::vector<double>& m = msg[v][back];
          for (int y = 0; y < r_.dom(v); ++y)
            m[y] = 0.5 * m[y] + 0.5 * std::min(out[y] - lowest, 1e29);
        }
      }
    }
    for (int v : core) {
      double best = 1e300;
      for (int x = 0; x < r_.dom(v); ++x) {
        double b = total_[v][x];
        for (int e : peel_.core_adj[v]) b += msg[v][e][x];
        if (b < best) best = b, s[v] = x;
      }
    }
  }

  int best_alone(int v) const {
    return int(std::min_element(total_[v].begin(), total_[v].end()) - total_[v].begin());
  }

  double core_value(int v, int x, const std::vector<int>& s) const {
    work_ += 1 + int64_t(peel_.core_adj[v].size());
    double c = total_[v][x];
    for (int e : peel_.core_adj[v]) {
      const Neighbor& nb = r_.adj[v][e];
      c += value_of(r_.edge_cost(nb, x, s[nb.var]));
    }
    return c;
  }

  void core_descent(std::vector<int>& s) {
    std::vector<int> order = peel_.core_vars;
    for (int pass = 0; pass < 100 && !late(); ++pass) {
      std::shuffle(order.begin(), order.end(), rng_);
      bool changed = false;
      for (int v : order) {
        double best = core_value(v, s[v], s);
        int arg = s[v];
        for (int x = 0; x < r_.dom(v); ++x) {
          const double c = core_value(v, x, s);
          if (c < best - 1e-9 * std::max(1.0, std::fabs(best))) best = c, arg = x;
        }
        if (arg != s[v]) s[v] = arg, changed = true;
      }
      if (!changed) break;
    }
  }

  // Block coordinate descent over induced trees of the core: a region grown
  // from a random variable (adding only variables with exactly one
  // neighbour inside, so it stays a tree) is set to its exact optimum given
  // everything outside, by dynamic programming from its leaves to its root.
  void tree_descent(std::vector<int>& s, int patience) {
    const std::vector<int>& core = peel_.core_vars;
    if (core.empty()) return;
    std::vector<int> stamp_of(r_.vars, 0), pos(r_.vars, -1);
    int stale = 0, stamp = 0;
    std::vector<int> region, parent, parent_edge;
    std::vector<std::vector<double>> tot;
    std::vector<std::vector<int>> arg;
    while (stale < patience && !late()) {
      ++stamp;
      const int root = core[rng_() % core.size()];
      const int limit = 4 << (rng_() % 9);  // 4 .. 1024 variables
      region.assign(1, root);
      parent.assign(1, -1);
      parent_edge.assign(1, -1);
      stamp_of[root] = stamp;
      pos[root] = 0;
      for (size_t q = 0; q < region.size() && int(region.size()) < limit; ++q) {
        const int x = region[q];
        for (int e : peel_.core_adj[x]) {
          const int y = r_.adj[x][e].var;
          if (stamp_of[y] == stamp) continue;
          int inside = 0, back = -1;
          for (int f : peel_.core_adj[y])
            if (stamp_of[r_.adj[y][f].var] == stamp) ++inside, back = f;
          if (inside != 1) continue;
          stamp_of[y] = stamp;
          pos[y] = static_cast<int>(region.size());
          region.push_back(y);
          parent.push_back(static_cast<int>(q));
          parent_edge.push_back(back);
          if (int(region.size()) >= limit) break;
        }
      }
      // Unaries with the edges to the outside, then messages to the root.
      double before = 0;
      tot.resize(region.size());
      arg.resize(region.size());
      for (size_t q = 0; q < region.size(); ++q) {
        const int x = region[q];
        tot[q].assign(r_.dom(x), 0);
        work_ += r_.dom(x) * int64_t(1 + peel_.core_adj[x].size());
        for (int j = 0; j < r_.dom(x); ++j) tot[q][j] = total_[x][j];
        before += total_[x][s[x]];
        for (int e : peel_.core_adj[x]) {
          const Neighbor& nb = r_.adj[x][e];
          if (stamp_of[nb.var] == stamp) {
            if (nb.row) before += value_of(r_.edge_cost(nb, s[x], s[nb.var]));
            continue;
          }
          before += value_of(r_.edge_cost(nb, s[x], s[nb.var]));
          for (int j = 0; j < r_.dom(x); ++j) tot[q][j] += value_of(r_.edge_cost(nb, j, s[nb.var]));
        }
      }
      for (size_t q = region.size(); q-- > 1;) {
        send_up(r_.adj[region[q]][parent_edge[q]], tot[q], tot[parent[q]], arg[q]);
      }
      const int best_root = int(std::min_element(tot[0].begin(), tot[0].end()) - tot[0].begin());
      const double after = tot[0][best_root];
      if (after < before - 1e-9 * std::max(1.0, std::fabs(before))) {
        s[root] = best_root;
        for (size_t q = 1; q < region.size(); ++q) s[region[q]] = arg[q][s[region[parent[q]]]];
        stale = 0;
      } else {
        ++stale;
      }
    }
  }

  std::vector<int64_t> usage_profile(const std::vector<int>& s) const {
    std::vector<int64_t> delta(r_.segments + 1, 0);
    for (int v = 0; v < r_.vars; ++v)
      for (const MemTerm& m : r_.mem[v]) delta[m.lo] += m.usage[s[v]], delta[m.hi] -= m.usage[s[v]];
    std::vector<int64_t> profile(r_.segments);
    int64_t cur = 0;
    for (int t = 0; t < r_.segments; ++t) profile[t] = (cur += delta[t]) + r_.base[t];
    return profile;
  }

  // A subgradient step on the memory prices (solver/prices.h), aimed at the
  // best answer that fits. The fixed rise per round it replaces (from a
  // median cost per byte, nearly 0 on S) took 40 rounds to reach S's
  // prices, more than a 60 s limit holds. Theta halves when the Lagrangian
  // value has not risen for 5 steps. Each basin of the heuristic priced
  // solve suits one rule (on M and its variants either can end 4% above the
  // other), so the threads of a solve alternate rules.
  void update_prices(const std::vector<int64_t>& profile, __int128 cost,
                     std::optional<__int128> best) {
    if (r_.limit == kInf) return;
    work_ += r_.segments;
    const double value = lagrangian_value(prices_, profile, r_.limit, double(cost));
    if (value > best_value_ * (1 + 1e-6)) {
      best_value_ = value;
      stalled_ = 0;
    } else if (++stalled_ >= 5) {
      theta_ = std::max(theta_ / 2, 1.0 / 64);
      stalled_ = 0;
    }
    // Without an answer that fits yet, aim a tenth above the value; at or
    // below it (the priced solve is a heuristic), a little above.
    const double target = best ? double(*best) : value + 0.1 * std::fabs(value) + 1;
    step_prices(prices_, profile, r_.limit, value,
                std::max(target, value + 1e-3 * std::fabs(value) + 1), theta_, price_rule_);
  }

  // ---- the true problem ----

  __int128 true_cost(const std::vector<int>& s) const {
    work_ += r_.vars + int64_t(r_.edges.size());
    __int128 total = r_.constant;
    for (int v = 0; v < r_.vars; ++v) {
      total += r_.cost[v][s[v]];
      for (const Neighbor& nb : r_.adj[v])
        if (nb.row) total += r_.edge_cost(nb, s[v], s[nb.var]);
    }
    return total;
  }

  // The change in true cost when v takes x (kInf: forbidden), summed in
  // 128 bits (a variable of many neighbours with large costs passes 2^63)
  // and clamped to +-kInf.
  int64_t delta_cost(int v, int x, const std::vector<int>& s) const {
    work_ += 1 + int64_t(r_.adj[v].size());
    if (r_.cost[v][x] >= kInf) return kInf;
    __int128 d = r_.cost[v][x] - std::min(r_.cost[v][s[v]], kInf / 4);
    for (const Neighbor& nb : r_.adj[v]) {
      const int64_t then = r_.edge_cost(nb, x, s[nb.var]);
      if (then >= kInf) return kInf;
      d += then - std::min(r_.edge_cost(nb, s[v], s[nb.var]), kInf / 4);
    }
    return static_cast<int64_t>(std::clamp<__int128>(d, -kInf, kInf));
  }

  void apply_memory(int v, int from, int to) {
    work_ += int64_t(r_.mem[v].size());
    for (const MemTerm& m : r_.mem[v]) tree_.add(m.lo, m.hi, m.usage[to] - m.usage[from]);
  }

  void load_tree(const std::vector<int>& s) {
    work_ += r_.vars + r_.segments;
    tree_ = MaxTree(r_.segments);
    for (int t = 0; t < r_.segments; ++t) tree_.add(t, t + 1, r_.base[t]);
    for (int v = 0; v < r_.vars; ++v)
      for (const MemTerm& m : r_.mem[v]) tree_.add(m.lo, m.hi, m.usage[s[v]]);
  }

  // The variables with memory live in segment t (cached: peaks recur).
  const std::vector<int>& live_at(int t) {
    auto it = live_cache_.find(t);
    if (it != live_cache_.end()) return it->second;
    std::vector<int> live;
    work_ += r_.vars;
    for (int v = 0; v < r_.vars; ++v)
      for (const MemTerm& m : r_.mem[v])
        if (m.lo <= t && t < m.hi) {
          live.push_back(v);
          break;
        }
    return live_cache_[t] = std::move(live);
  }

  int64_t usage_at(int v, int x, int t) const {
    ++work_;
    int64_t u = 0;
    for (const MemTerm& m : r_.mem[v])
      if (m.lo <= t && t < m.hi) u += m.usage[x];
    return u;
  }

  // A move of repair: v to x, at `score` cost per unit of memory it frees
  // at the segment it was scored for; `stamp` is v's stamp then.
  struct Freeing {
    double score;
    int v, x;
    int64_t stamp;
    bool operator<(const Freeing& o) const { return score > o.score; }  // a min-heap
  };

  // v's cheapest move per unit freed at segment t (none: nothing frees).
  std::optional<Freeing> cheapest_freeing(int v, int t, const std::vector<int>& s) const {
    const int64_t now = usage_at(v, s[v], t);
    std::optional<Freeing> best;
    for (int x = 0; x < r_.dom(v); ++x) {
      const int64_t freed = now - usage_at(v, x, t);
      if (freed <= 0) continue;
      const int64_t d = delta_cost(v, x, s);
      if (d >= kInf / 2) continue;
      const double score = double(d) / double(freed);
      if (!best || score < best->score) best = Freeing{score, v, x, stamps_[v]};
    }
    return best;
  }

  // v moved: its own candidate and its neighbours' cost changes are stale.
  void touch(int v) {
    ++stamps_[v];
    for (const Neighbor& nb : r_.adj[v]) ++stamps_[nb.var];
  }

  void rescore(int v, int t, const std::vector<int>& s, std::vector<Freeing>& heap) const {
    if (auto c = cheapest_freeing(v, t, s)) {
      heap.push_back(*c);
      std::push_heap(heap.begin(), heap.end());
    }
  }

  // Moves that free memory at the peak, cheapest per byte freed first,
  // until the limit holds. The variables live at the peak are scored once
  // into a heap that serves every move there until that segment fits (a
  // move scores its variable and neighbours again; stamps mark their old
  // entries stale); the next peak gets a new scan. Scanning every live
  // variable before each move took 4 s a round on S (2,000 moves, 80 peaks).
  bool repair(std::vector<int>& s) {
    load_tree(s);
    if (r_.limit == kInf) return true;
    stamps_.assign(r_.vars, 0);
    std::vector<Freeing> heap;
    int guard = 0;
    while (tree_.max() > r_.limit) {
      const int t = tree_.argmax();
      heap.clear();
      for (int v : live_at(t))
        if (auto c = cheapest_freeing(v, t, s)) heap.push_back(*c);
      std::make_heap(heap.begin(), heap.end());
      while (tree_.max(t, t + 1) > r_.limit) {
        if ((++guard & 63) == 0 && late()) return false;
        if (heap.empty()) return false;
        std::pop_heap(heap.begin(), heap.end());
        const Freeing c = heap.back();
        heap.pop_back();
        if (c.stamp != stamps_[c.v]) continue;  // scored again when it moved
        apply_memory(c.v, s[c.v], c.x);
        s[c.v] = c.x;
        touch(c.v);
        // The move changed its neighbours' costs (and its own memory): a
        // neighbour with no candidate before, forbidden by v's old value
        // say, may have one now.
        rescore(c.v, t, s, heap);
        for (const Neighbor& nb : r_.adj[c.v]) rescore(nb.var, t, s, heap);
      }
    }
    return true;
  }

  bool fits_after(int v, int from, int to) {
    apply_memory(v, from, to);
    const bool ok = tree_.max() <= r_.limit;
    apply_memory(v, to, from);
    return ok;
  }

  // Moves of one variable that lower the true cost and keep the limit.
  void improve(std::vector<int>& s) {
    std::vector<int> order(r_.vars);
    std::iota(order.begin(), order.end(), 0);
    for (int pass = 0; pass < 50; ++pass) {
      std::shuffle(order.begin(), order.end(), rng_);
      bool changed = false;
      int checked = 0;
      for (int v : order) {
        if ((++checked & 1023) == 0 && late()) return;
        int64_t best = 0;
        int arg = -1;
        for (int x = 0; x < r_.dom(v); ++x) {
          if (x == s[v]) continue;
          const int64_t d = delta_cost(v, x, s);
          if (d < best && (r_.limit == kInf || fits_after(v, s[v], x))) best = d, arg = x;
        }
        if (arg >= 0) {
          apply_memory(v, s[v], arg);
          s[v] = arg;
          changed = true;
        }
      }
      if (!changed || late()) break;
    }
  }

  // Exact steps by mixed-integer programming: the whole problem when it is
  // small (once), else a neighbourhood of the memory peak each round.
  void mip_step(std::vector<int>& s) {
    const double left = seconds_left();
    if (left <= 0 || proven_optimal_) return;
    std::vector<int> free;
    double budget = 0;
    if (whole_columns_ < 0) {
      std::vector<int> all(r_.vars);
      std::iota(all.begin(), all.end(), 0);
      whole_columns_ = int64_t(mip_columns(r_, all));
    }
    // CBC overshoots short time limits on programs of tens of thousands of
    // columns by seconds: with under a second left, only small ones run.
    const bool tiny = whole_columns_ <= 10000;
    if (left < 1.0 && !tiny) return;
    if (whole_columns_ <= 300000) {
      // Small: a few rounds of heuristics for a good start (one when time
      // is short: a planner's quarter second), then the whole problem at
      // once, which CBC often proves optimal in a fraction of a second.
      if (whole_tried_ || (rounds_ < 3 && left > 1.0)) return;
      whole_tried_ = true;
      free.resize(r_.vars);
      std::iota(free.begin(), free.end(), 0);
      // All the time left: CBC's process is cut off at the deadline, and
      // asked to stop well before it, so its best solution comes back
      // (killed, it would bring none).
      budget = left;
    } else {
      free = peak_neighbourhood(s);
      budget = std::min(3.0, left * 0.2);
    }
    std::vector<int> trial = s;
    const bool whole = int(free.size()) == r_.vars;
    // Deterministic mode: CBC's budget in LP iterations, each costing
    // kCbcWorkPerColumn per column of the program.
    const int64_t nodes =
        deterministic()
            ? std::max<int64_t>(1, int64_t(budget * kSolverWorkPerSecond /
                                           double(kCbcWorkPerColumn *
                                                  std::max<size_t>(1, mip_columns(r_, free)))))
            : 0;
    const MipResult m = mip_improve(
        r_, free, trial, budget, [this] { return stopped(); }, nodes);
    work_ += m.work;
    if (std::getenv("SOLVER_DEBUG"))
      fprintf(stderr, "program: %zu variables, %zu columns, %lld iterations allowed, %lld work\n",
              free.size(), mip_columns(r_, free), (long long)nodes, (long long)m.work);
    guard_hit_ = guard_hit_ || m.guard_hit;
    if (!m.improved) {
      // CBC proved the current answer optimal without bettering it.
      if (m.optimal && whole) proven_optimal_ = true;
      return;
    }
    // Keep it only if it is, exactly, cheaper and fits.
    const __int128 before = true_cost(s), after = true_cost(trial);
    std::vector<int> old = s;
    load_tree(trial);
    if (after < before && (r_.limit == kInf || tree_.max() <= r_.limit)) {
      s = trial;
      proven_optimal_ = m.optimal && whole;
    } else {
      load_tree(old);
    }
  }

 public:
  bool proven_optimal() const { return proven_optimal_; }

 private:
  // Variables live at the memory peak and around it, as many as a program
  // of moderate size holds.
  std::vector<int> peak_neighbourhood(const std::vector<int>& s) {
    (void)s;
    const int t = tree_.argmax();
    std::vector<int> seed = live_at(t);
    std::shuffle(seed.begin(), seed.end(), rng_);
    std::vector<char> in(r_.vars, 0);
    std::vector<int> free;
    auto try_add = [&](int v) {
      if (in[v]) return;
      free.push_back(v);
      if (mip_columns(r_, free) > 40000 || free.size() > 300) {
        free.pop_back();
        return;
      }
      in[v] = 1;
    };
    for (int v : seed) try_add(v);
    for (size_t q = 0; q < free.size() && free.size() < 300; ++q)
      for (const Neighbor& nb : r_.adj[free[q]]) try_add(nb.var);
    return free;
  }

  // Moves that pay but overflow somewhere, made to fit by a second move that
  // frees memory there for less than the first one gains.
  bool pair_moves(std::vector<int>& s) {
    if (r_.limit == kInf) return false;
    bool any = false;
    std::vector<int> order(r_.vars);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng_);
    for (int b : order) {
      if (late()) break;
      for (int y = 0; y < r_.dom(b); ++y) {
        if (y == s[b]) continue;
        const int64_t gain = delta_cost(b, y, s);
        if (gain >= 0) continue;
        const int yb = s[b];
        apply_memory(b, yb, y);
        s[b] = y;
        if (tree_.max() <= r_.limit) {  // fits after all (an earlier move made room)
          any = true;
          break;
        }
        const int t = tree_.argmax();
        int64_t best = -gain;  // the second move must cost less than this
        int ba = -1, bx = -1;
        for (int a : live_at(t)) {
          if (a == b) continue;
          const int64_t now = usage_at(a, s[a], t);
          for (int x = 0; x < r_.dom(a); ++x) {
            if (usage_at(a, x, t) >= now) continue;
            const int64_t d = delta_cost(a, x, s);
            if (d >= best) continue;
            if (fits_after(a, s[a], x)) best = d, ba = a, bx = x;
          }
        }
        if (ba >= 0) {
          apply_memory(ba, s[ba], bx);
          s[ba] = bx;
          any = true;
          break;
        }
        apply_memory(b, y, yb);
        s[b] = yb;
      }
    }
    return any;
  }

  // Region moves under the true problem: an induced tree of the whole
  // variable graph is set to its optimum under true costs plus the current
  // memory prices (which steer it away from the peak), given everything
  // outside; the move is kept when it lowers the true cost and fits.
  void polish(std::vector<int>& s) {
    if (r_.vars == 0) return;
    std::vector<double> prefix(r_.segments + 1, 0.0);
    std::vector<int> stamp_of(r_.vars, 0);
    std::vector<int> region, parent, parent_edge, trial;
    std::vector<std::vector<double>> tot;
    std::vector<std::vector<int>> arg;
    int stamp = 0, stale = 0;
    while (stale < 60 && !late()) {
      ++stamp;
      // Memory priced at a random scale of the current prices (0: ignored).
      const double scale = std::ldexp(1.0, static_cast<int>(rng_() % 7) - 3) * (rng_() % 4 != 0);
      for (int t = 0; t < r_.segments; ++t) prefix[t + 1] = prefix[t] + scale * prices_[t];
      const int root = static_cast<int>(rng_() % r_.vars);
      const int limit = 2 << (rng_() % 8);  // 2 .. 256 variables
      region.assign(1, root);
      parent.assign(1, -1);
      parent_edge.assign(1, -1);
      stamp_of[root] = stamp;
      for (size_t q = 0; q < region.size() && int(region.size()) < limit; ++q) {
        const int x = region[q];
        for (const Neighbor& nb : r_.adj[x]) {
          const int y = nb.var;
          if (stamp_of[y] == stamp) continue;
          int inside = 0, back = -1;
          for (size_t f = 0; f < r_.adj[y].size(); ++f)
            if (stamp_of[r_.adj[y][f].var] == stamp) ++inside, back = static_cast<int>(f);
          if (inside != 1) continue;
          stamp_of[y] = stamp;
          region.push_back(y);
          parent.push_back(static_cast<int>(q));
          parent_edge.push_back(back);
          if (int(region.size()) >= limit) break;
        }
      }
      tot.resize(region.size());
      arg.resize(region.size());
      for (size_t q = 0; q < region.size(); ++q) {
        const int x = region[q];
        tot[q].resize(r_.dom(x));
        work_ += r_.dom(x) * int64_t(1 + r_.adj[x].size() + r_.mem[x].size());
        for (int j = 0; j < r_.dom(x); ++j) {
          double c = value_of(r_.cost[x][j]);
          for (const MemTerm& m : r_.mem[x])
            c += double(m.usage[j]) * (prefix[m.hi] - prefix[m.lo]);
          tot[q][j] = c;
        }
        for (const Neighbor& nb : r_.adj[x]) {
          if (stamp_of[nb.var] == stamp) continue;
          for (int j = 0; j < r_.dom(x); ++j) tot[q][j] += value_of(r_.edge_cost(nb, j, s[nb.var]));
        }
      }
      for (size_t q = region.size(); q-- > 1;) {
        send_up(r_.adj[region[q]][parent_edge[q]], tot[q], tot[parent[q]], arg[q]);
      }
      trial.resize(region.size());
      trial[0] = int(std::min_element(tot[0].begin(), tot[0].end()) - tot[0].begin());
      for (size_t q = 1; q < region.size(); ++q) trial[q] = arg[q][trial[parent[q]]];
      // True change: move the region one variable at a time.
      __int128 delta = 0;
      bool changed = false;
      std::vector<int> old(region.size());
      for (size_t q = 0; q < region.size(); ++q) old[q] = s[region[q]];
      for (size_t q = 0; q < region.size(); ++q) {
        const int x = region[q];
        if (trial[q] == s[x]) continue;
        const int64_t d = delta_cost(x, trial[q], s);
        if (d >= kInf / 2) {
          delta = kInf;
          break;
        }
        delta += d;
        apply_memory(x, s[x], trial[q]);
        s[x] = trial[q];
        changed = true;
      }
      const bool fits = r_.limit == kInf || tree_.max() <= r_.limit;
      if (changed && delta < 0 && fits) {
        stale = 0;
        continue;
      }
      for (size_t q = 0; q < region.size(); ++q) {
        const int x = region[q];
        if (s[x] != old[q]) apply_memory(x, s[x], old[q]), s[x] = old[q];
      }
      ++stale;
    }
  }

  const Reduced& r_;
  const std::atomic<bool>* stop_;    // set when another thread proved its answer
  const std::atomic<bool>* cancel_;  // the caller's (SolveOptions::cancel)
  Clock::time_point deadline_ = Clock::time_point::max();
  int64_t work_limit_ = 0;  // > 0: deterministic mode, the limit in work units
  mutable int64_t work_ = 0;
  bool guard_hit_ = false;
  std::optional<__int128> lower_bound_;
  const Peeling& peel_;
  std::mt19937_64 rng_;
  PriceRule price_rule_;
  std::vector<double> prices_;
  double theta_ = 1;                   // the price step's scale (update_prices)
  double best_value_ = -1e300;         // the highest Lagrangian value seen
  int stalled_ = 0;                    // steps since it rose
  std::optional<__int128> best_cost_;  // this search's best answer that fits
  MaxTree tree_;
  std::vector<std::vector<double>> total_;
  std::vector<std::vector<int>> choice_;
  std::map<int, std::vector<int>> live_cache_;
  std::vector<int64_t> stamps_;  // per variable: bumped when it or a neighbour moves (repair)
  std::vector<double> best_;     // send_up's
  std::vector<std::vector<std::vector<double>>> messages_;  // belief propagation's, kept warm
  int64_t rounds_ = 0;
  bool whole_tried_ = false;
  int64_t whole_columns_ = -1;  // columns of the whole problem as one program (-1: not known yet)
  bool proven_optimal_ = false;

 public:
  bool use_mip_ = false;  // one thread runs the programs (CBC)
};

struct Shared {
  std::mutex mu;
  std::vector<int> best;
  __int128 cost = 0;
  int64_t peak = 0;
  bool have = false;
  int thread = 0;
};

// Each node's strategy of smallest usage.
std::vector<int> smallest_usages(const ShardingProblem& problem) {
  std::vector<int> smallest;
  for (const auto& node : problem.nodes)
    smallest.push_back(
        int(std::min_element(node.usage.begin(), node.usage.end()) - node.usage.begin()));
  return smallest;
}

// Proofs that nothing fits, before any search: the smallest usage of every
// node at once overflows; or, with the choices the edges allow (pruned
// values out, a tied group on one value: peak_floor), the least usages do
// (a limit lowered by AutoShard's memory check, say, ends here instead of
// searching until its time is up). The proof in words, or nullopt.
std::optional<std::string> overflows(const ShardingProblem& problem,
                                     const std::vector<int>& smallest) {
  if (!problem.usage_limit || smallest.empty()) return std::nullopt;
  const __int128 peak = problem.exact_peak_usage(smallest);
  if (peak <= *problem.usage_limit) return std::nullopt;
  return cat("no assignment fits: the smallest usages alone peak at ", to_string(peak),
             ", above the limit of ", *problem.usage_limit);
}
std::optional<std::string> overflows(const ShardingProblem& problem, const Reduced& reduced) {
  if (!problem.usage_limit) return std::nullopt;
  const __int128 floor = peak_floor(problem, reduced);
  if (floor <= *problem.usage_limit) return std::nullopt;
  return cat("no assignment fits: with the choices its edges allow, the least usages peak at ",
             to_string(floor), ", above the limit of ", *problem.usage_limit);
}

// The answer when nothing fits: the smallest usages as a placeholder, and why.
SolveResult proven_infeasible(const ShardingProblem& problem, const std::vector<int>& smallest,
                              const std::string& why) {
  SolveResult r;
  r.strategy = smallest;
  r.cost = problem.cost(smallest);
  r.peak_usage = problem.peak_usage(smallest);
  r.proven_infeasible = true;
  r.why = why;
  return r;
}

}  // namespace

SolveResult solve(const ShardingProblem& problem, const SolveOptions& options) {
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(options.time_limit_s));
  problem.validate("solve");
  SolveResult result;
  const int n = static_cast<int>(problem.nodes.size());
  auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const std::vector<int> smallest = smallest_usages(problem);
  if (auto why = overflows(problem, smallest)) return proven_infeasible(problem, smallest, *why);
  auto reduced_memory = std::make_unique<const Reduced>(reduce(problem));
  const Reduced& reduced = *reduced_memory;
  if (reduced.infeasible) return proven_infeasible(problem, smallest, reduced.why);
  if (auto why = overflows(problem, reduced)) return proven_infeasible(problem, smallest, *why);
  auto peeling_memory = std::make_unique<const Peeling>(peel(reduced));
  const Peeling& peeling = *peeling_memory;
  if (options.leave_memory_to_exit) {
    (void)reduced_memory.release();
    (void)peeling_memory.release();
  }
  if (std::getenv("SOLVER_DEBUG")) {
    size_t edges = reduced.edges.size(), maxdom = 0;
    for (int v = 0; v < reduced.vars; ++v) maxdom = std::max<size_t>(maxdom, reduced.dom(v));
    fprintf(stderr,
            "reduced: %d nodes -> %d variables, %zu edges, core %zu, max domain %zu, segments %d\n",
            n, reduced.vars, edges, peeling.core_vars.size(), maxdom, reduced.segments);
  }
  Shared shared;
  std::atomic<int64_t> rounds{0}, work{0};
  std::atomic<bool> guard_hit{false};
  // Deterministic mode: the limit in work units per thread (at least 1).
  const int64_t work_limit =
      options.deterministic
          ? std::max<int64_t>(1,
                              int64_t(std::min(options.time_limit_s * kSolverWorkPerSecond, 9e18)))
          : 0;
  std::atomic<bool> stop{false};  // the answer is proven optimal
  auto cancelled = [&] { return options.cancel && *options.cancel; };
  auto worker = [&](int thread) {
    Search search(reduced, peeling, options.seed, thread, &stop, options.cancel, work_limit);
    search.use_mip_ = thread == 0 && options.programs;
    std::vector<int> s;
    for (int64_t round = 0; options.max_rounds == 0 || round < options.max_rounds; ++round) {
      const bool over = work_limit > 0 ? search.out_of_work() : Clock::now() > deadline;
      if ((over && round > 0) || stop || cancelled()) break;
      __int128 cost = 0;
      int64_t peak = 0;
      const bool ok =
          search.round(s, cost, peak, work_limit > 0 ? Clock::time_point::max() : deadline);
      ++rounds;
      if (work_limit > 0 && search.guard_hit()) guard_hit = true;
      if (search.proven_optimal()) stop = true;
      // Repair makes room, not allowed pairs: an answer that fits only with
      // a forbidden choice is none (it was kept, and failed the check of
      // its cost below, when nothing else fit).
      if (!ok || cost >= kInf) continue;
      std::lock_guard<std::mutex> lock(shared.mu);
      if (!shared.have || cost < shared.cost || (cost == shared.cost && thread < shared.thread)) {
        shared.have = true;
        shared.best = s;
        shared.cost = cost;
        shared.peak = peak;
        shared.thread = thread;
        // The search counts memory in the reduced problem's units.
        if (reduced.usage_shift > 0) peak = problem.peak_usage(expand(reduced, s));
        if (options.on_improvement) options.on_improvement({elapsed(), cost, peak, round});
      }
    }
    work += search.work();
  };
  const int threads = std::max(1, options.threads);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  result.seconds = elapsed();
  result.rounds = rounds;
  result.work = work;
  result.work_guard_hit = guard_hit;
  if (!shared.have) {
    // No round finished (a huge problem, a short limit): the smallest
    // usages are still an answer when they are allowed.
    result.strategy = smallest;
    result.cost = problem.cost(smallest);
    result.peak_usage = problem.peak_usage(smallest);
    result.feasible = problem.feasible(smallest);
    if (!result.feasible)
      result.why = cat("no feasible assignment found in ", result.seconds,
                       " s; give it more time (--time-limit)");
    return result;
  }
  result.strategy = expand(reduced, shared.best);
  result.cost = problem.cost(result.strategy);
  result.peak_usage = problem.peak_usage(result.strategy);
  result.feasible = problem.feasible(result.strategy);
  result.proven_optimal = stop;
  AS_CHECK(result.cost == shared.cost, "internal: the solver's cost ", to_string(shared.cost),
           " differs from the problem's ", to_string(result.cost));
  if (!result.feasible) result.why = "internal: the answer breaks the problem's constraints";
  return result;
}

}  // namespace autoshard
