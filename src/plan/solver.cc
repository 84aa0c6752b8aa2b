#include "autoshard/plan/solver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>
#include <cstdio>
#include <cstdlib>

#include "autoshard/error.h"

namespace autoshard {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kInf = int64_t{1} << 62;

int64_t sat_add(int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r)) return kInf;
  return std::min(r, kInf);
}
int64_t finite(int64_t c) {
  return c >= kForbiddenCost ? kInf : c;
}

struct Matrix {
  int rows = 0, cols = 0;
  std::vector<int64_t> c;  // rows x cols
  int64_t at(int r, int k) const { return c[size_t(r) * cols + k]; }
  int64_t& at(int r, int k) { return c[size_t(r) * cols + k]; }
};

// One neighbour: the merged edge to it, and whether we index its rows.
struct Neighbor {
  int var;
  int edge;
  bool row;
};

// A piece of a variable's memory: usage per value while live in [lo, hi).
struct MemTerm {
  int lo = 0, hi = 0;
  std::vector<int64_t> usage;
};

// ---- reduction ----
//
// XLA's problems tie many pairs of nodes by one-to-one edges (a strategy of
// one allows exactly one strategy of the other, the rest forbidden): an op
// and the value it passes on, sharded alike. Such nodes are one decision.
// The reduction prunes forbidden values (arc consistency), merges the tied
// nodes into variables, folds fixed nodes into their neighbours, and sums
// parallel edges. Local moves then change whole tied groups at once.

struct Reduced {
  int vars = 0;
  std::vector<std::vector<int64_t>> cost;  // per variable, per value
  std::vector<std::vector<MemTerm>> mem;   // per variable
  std::vector<Matrix> edges;
  std::vector<std::vector<Neighbor>> adj;
  int segments = 1;
  int64_t limit = kInf;
  std::vector<int64_t> base;  // usage of fixed nodes per segment
  int64_t constant = 0;       // cost of fixed nodes and edges
  // Expanding a solution: per original node, its variable (-1: fixed) and
  // its strategy for each value of that variable (fixed: one entry).
  std::vector<int> var_of;
  std::vector<std::vector<int>> strategy_of;
  bool infeasible = false;
  std::string why;

  int dom(int v) const { return static_cast<int>(cost[v].size()); }
  int64_t edge_cost(const Neighbor& nb, int mine, int theirs) const {
    const Matrix& m = edges[nb.edge];
    return nb.row ? m.at(mine, theirs) : m.at(theirs, mine);
  }
};

class UnionFind {
 public:
  explicit UnionFind(int n) : p_(n) { std::iota(p_.begin(), p_.end(), 0); }
  int find(int x) {
    while (p_[x] != x) x = p_[x] = p_[p_[x]];
    return x;
  }
  void unite(int a, int b) {
    a = find(a), b = find(b);
    if (a != b) p_[std::max(a, b)] = std::min(a, b);
  }

 private:
  std::vector<int> p_;
};

// An edge of the original problem between two different nodes, merged.
struct PairEdge {
  int a, b;  // a < b
  Matrix m;  // K_a x K_b, kInf forbidden
};

Reduced reduce(const ShardingProblem& p) {
  const int n = static_cast<int>(p.nodes.size());
  Reduced r;
  std::vector<std::vector<int64_t>> cost(n);
  for (int i = 0; i < n; ++i)
    for (int64_t c : p.nodes[i].cost) cost[i].push_back(finite(c));
  std::map<std::pair<int, int>, int> index;
  std::vector<PairEdge> pairs;
  for (const auto& e : p.edges) {
    const int ku = static_cast<int>(p.nodes[e.u].cost.size());
    const int kv = static_cast<int>(p.nodes[e.v].cost.size());
    if (e.u == e.v) {
      for (int j = 0; j < ku; ++j) cost[e.u][j] = sat_add(cost[e.u][j], finite(e.cost[size_t(j) * ku + j]));
      continue;
    }
    const int a = std::min(e.u, e.v), b = std::max(e.u, e.v);
    auto [it, fresh] = index.emplace(std::make_pair(a, b), int(pairs.size()));
    if (fresh) {
      const int ka = a == e.u ? ku : kv, kb = a == e.u ? kv : ku;
      pairs.push_back({a, b, {ka, kb, std::vector<int64_t>(size_t(ka) * kb, 0)}});
    }
    Matrix& m = pairs[it->second].m;
    for (int ju = 0; ju < ku; ++ju)
      for (int jv = 0; jv < kv; ++jv) {
        int64_t& cell = e.u == a ? m.at(ju, jv) : m.at(jv, ju);
        cell = sat_add(cell, finite(e.cost[size_t(ju) * kv + jv]));
      }
  }
  std::vector<std::vector<std::pair<int, bool>>> node_adj(n);  // (pair, is a)
  for (size_t k = 0; k < pairs.size(); ++k) {
    node_adj[pairs[k].a].push_back({int(k), true});
    node_adj[pairs[k].b].push_back({int(k), false});
  }
  auto entry = [&](int k, bool is_a, int mine, int theirs) {
    return is_a ? pairs[k].m.at(mine, theirs) : pairs[k].m.at(theirs, mine);
  };

  // Arc consistency on forbidden choices: a strategy stays only if every
  // neighbour has some allowed strategy the edge does not forbid with it.
  std::vector<std::vector<char>> allowed(n);
  for (int i = 0; i < n; ++i) {
    allowed[i].resize(cost[i].size());
    for (size_t j = 0; j < cost[i].size(); ++j) allowed[i][j] = cost[i][j] < kInf;
  }
  {
    std::vector<int> queue(n);
    std::iota(queue.begin(), queue.end(), 0);
    std::vector<char> queued(n, 1);
    while (!queue.empty()) {
      const int i = queue.back();
      queue.pop_back();
      queued[i] = 0;
      for (auto [k, is_a] : node_adj[i]) {
        const int x = is_a ? pairs[k].b : pairs[k].a;
        bool pruned = false;
        for (size_t jx = 0; jx < allowed[x].size(); ++jx) {
          if (!allowed[x][jx]) continue;
          bool supported = false;
          for (size_t j = 0; j < allowed[i].size() && !supported; ++j)
            supported = allowed[i][j] && entry(k, is_a, int(j), int(jx)) < kInf;
          if (!supported) allowed[x][jx] = 0, pruned = true;
        }
        if (pruned && !queued[x]) queued[x] = 1, queue.push_back(x);
      }
    }
    for (int i = 0; i < n; ++i)
      if (std::find(allowed[i].begin(), allowed[i].end(), 1) == allowed[i].end()) {
        r.infeasible = true;
        r.why = cat("node ", i, ": every strategy is forbidden, by its own cost or its edges");
        return r;
      }
  }

  // One-to-one edges (on the allowed strategies) tie nodes into groups.
  std::vector<char> one_to_one(pairs.size(), 0);
  UnionFind groups(n);
  for (size_t k = 0; k < pairs.size(); ++k) {
    const PairEdge& e = pairs[k];
    std::vector<int> col_count(e.m.cols, 0);
    bool ok = true;
    for (int ja = 0; ja < e.m.rows && ok; ++ja) {
      if (!allowed[e.a][ja]) continue;
      int count = 0;
      for (int jb = 0; jb < e.m.cols; ++jb)
        if (allowed[e.b][jb] && e.m.at(ja, jb) < kInf) ++count, ++col_count[jb];
      ok = count == 1;
    }
    for (int jb = 0; jb < e.m.cols && ok; ++jb) ok = !allowed[e.b][jb] || col_count[jb] == 1;
    if (ok) one_to_one[k] = 1, groups.unite(e.a, e.b);
  }
  // Each member's strategy as a function of its group root's (BFS over the
  // one-to-one edges); values the group's inner edges forbid are dropped.
  std::vector<std::vector<int>> members(n);
  for (int i = 0; i < n; ++i) members[groups.find(i)].push_back(i);
  std::vector<std::vector<int>> map_of(n);  // per node: root value -> own strategy (-1: none)
  std::vector<int> root_of(n);
  for (int root = 0; root < n; ++root) {
    if (members[root].empty()) continue;
    const int kr = static_cast<int>(cost[root].size());
    map_of[root].assign(kr, -1);
    for (int j = 0; j < kr; ++j)
      if (allowed[root][j]) map_of[root][j] = j;
    std::vector<int> bfs{root};
    std::vector<char> seen_local;
    root_of[root] = root;
    std::map<int, bool> visited{{root, true}};
    for (size_t q = 0; q < bfs.size(); ++q) {
      const int x = bfs[q];
      for (auto [k, is_a] : node_adj[x]) {
        if (!one_to_one[k]) continue;
        const int y = is_a ? pairs[k].b : pairs[k].a;
        if (visited.count(y)) continue;
        visited[y] = true;
        root_of[y] = root;
        map_of[y].assign(kr, -1);
        for (int j = 0; j < kr; ++j) {
          const int jx = map_of[x][j];
          if (jx < 0) continue;
          for (size_t jy = 0; jy < cost[y].size(); ++jy)
            if (allowed[y][jy] && entry(k, is_a, jx, int(jy)) < kInf) map_of[y][j] = int(jy);
        }
        bfs.push_back(y);
      }
    }
    // Root values every member can follow, and every inner edge allows.
    std::vector<char> keep(kr, 1);
    for (int m : members[root])
      for (int j = 0; j < kr; ++j)
        if (map_of[m][j] < 0) keep[j] = 0;
    for (int m : members[root])
      for (auto [k, is_a] : node_adj[m]) {
        const int y = is_a ? pairs[k].b : pairs[k].a;
        if (!is_a || groups.find(y) != root) continue;
        for (int j = 0; j < kr; ++j)
          if (keep[j] && pairs[k].m.at(map_of[m][j], map_of[y][j]) >= kInf) keep[j] = 0;
      }
    for (int m : members[root])
      for (int j = 0; j < kr; ++j)
        if (!keep[j]) map_of[m][j] = -1;
    if (std::find(keep.begin(), keep.end(), 1) == keep.end()) {
      r.infeasible = true;
      r.why = cat("nodes tied to node ", root, " by one-to-one edges allow no common strategy");
      return r;
    }
  }

  // Variables: groups with a choice left. Values: the kept root values.
  std::vector<std::vector<int>> values(n);  // per root: its kept values
  r.var_of.assign(n, -1);
  std::vector<int> var_root;
  for (int root = 0; root < n; ++root) {
    if (members[root].empty()) continue;
    for (int j = 0; j < int(map_of[root].size()); ++j)
      if (map_of[root][j] >= 0) values[root].push_back(j);
    if (values[root].size() > 1) {
      const int v = static_cast<int>(var_root.size());
      var_root.push_back(root);
      for (int m : members[root]) r.var_of[m] = v;
    }
  }
  r.vars = static_cast<int>(var_root.size());
  r.strategy_of.resize(n);
  for (int i = 0; i < n; ++i)
    for (int j : values[root_of[i]]) r.strategy_of[i].push_back(map_of[i][j]);

  // Time: only where an interval starts or ends.
  std::vector<int64_t> points;
  for (const auto& node : p.nodes)
    if (node.lo < node.hi) points.push_back(node.lo), points.push_back(node.hi);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  r.segments = std::max<int>(1, int(points.size()) - 1);
  auto seg = [&](int64_t t) { return int(std::lower_bound(points.begin(), points.end(), t) - points.begin()); };
  if (p.usage_limit) r.limit = *p.usage_limit;
  r.base.assign(r.segments + 1, 0);

  r.cost.resize(r.vars);
  r.mem.resize(r.vars);
  for (int v = 0; v < r.vars; ++v) r.cost[v].assign(values[var_root[v]].size(), 0);
  std::vector<std::map<std::pair<int, int>, int>> term_index(r.vars);
  for (int i = 0; i < n; ++i) {
    const int v = r.var_of[i];
    const auto& node = p.nodes[i];
    if (v < 0) {
      const int j = r.strategy_of[i][0];
      r.constant = sat_add(r.constant, cost[i][j]);
      if (node.lo < node.hi) r.base[seg(node.lo)] += node.usage[j], r.base[seg(node.hi)] -= node.usage[j];
      continue;
    }
    for (size_t x = 0; x < r.cost[v].size(); ++x)
      r.cost[v][x] = sat_add(r.cost[v][x], cost[i][r.strategy_of[i][x]]);
    if (node.lo >= node.hi) continue;
    const std::pair<int, int> key{seg(node.lo), seg(node.hi)};
    auto [it, fresh] = term_index[v].emplace(key, int(r.mem[v].size()));
    if (fresh) r.mem[v].push_back({key.first, key.second, std::vector<int64_t>(r.cost[v].size(), 0)});
    for (size_t x = 0; x < r.cost[v].size(); ++x)
      r.mem[v][it->second].usage[x] += node.usage[r.strategy_of[i][x]];
  }
  for (int t = 1; t <= r.segments; ++t) r.base[t] += r.base[t - 1];

  // Edges between variables (or into one variable's costs, or constant).
  std::map<std::pair<int, int>, int> var_edges;
  for (const PairEdge& e : pairs) {
    const int va = r.var_of[e.a], vb = r.var_of[e.b];
    const auto& sa = r.strategy_of[e.a];
    const auto& sb = r.strategy_of[e.b];
    if (va >= 0 && va == vb) {
      for (size_t x = 0; x < sa.size(); ++x) r.cost[va][x] = sat_add(r.cost[va][x], e.m.at(sa[x], sb[x]));
    } else if (va < 0 && vb < 0) {
      r.constant = sat_add(r.constant, e.m.at(sa[0], sb[0]));
    } else if (va < 0) {
      for (size_t x = 0; x < sb.size(); ++x) r.cost[vb][x] = sat_add(r.cost[vb][x], e.m.at(sa[0], sb[x]));
    } else if (vb < 0) {
      for (size_t x = 0; x < sa.size(); ++x) r.cost[va][x] = sat_add(r.cost[va][x], e.m.at(sa[x], sb[0]));
    } else {
      const int lo = std::min(va, vb), hi = std::max(va, vb);
      auto [it, fresh] = var_edges.emplace(std::make_pair(lo, hi), int(r.edges.size()));
      if (fresh) r.edges.push_back({r.dom(lo), r.dom(hi), std::vector<int64_t>(size_t(r.dom(lo)) * r.dom(hi), 0)});
      Matrix& m = r.edges[it->second];
      for (size_t x = 0; x < sa.size(); ++x)
        for (size_t y = 0; y < sb.size(); ++y) {
          int64_t& cell = va == lo ? m.at(int(x), int(y)) : m.at(int(y), int(x));
          cell = sat_add(cell, e.m.at(sa[x], sb[y]));
        }
    }
  }
  r.adj.resize(r.vars);
  for (const auto& [key, e] : var_edges) {
    r.adj[key.first].push_back({key.second, e, true});
    r.adj[key.second].push_back({key.first, e, false});
  }
  return r;
}

// ---- memory over time: range add, range max ----

class MaxTree {
 public:
  explicit MaxTree(int n = 1) : n_(n), max_(4 * n, 0), add_(4 * n, 0) {}
  void add(int lo, int hi, int64_t v) {
    if (lo < hi && v != 0) add(1, 0, n_, lo, hi, v);
  }
  int64_t max(int lo, int hi) const { return lo < hi ? max(1, 0, n_, lo, hi) : INT64_MIN; }
  int64_t max() const { return max_[1]; }
  int argmax() const {
    int node = 1, l = 0, r = n_;
    while (r - l > 1) {
      const int m = (l + r) / 2;
      if (max_[2 * node] >= max_[2 * node + 1])
        node = 2 * node, r = m;
      else
        node = 2 * node + 1, l = m;
    }
    return l;
  }

 private:
  void add(int node, int l, int r, int lo, int hi, int64_t v) {
    if (hi <= l || r <= lo) return;
    if (lo <= l && r <= hi) {
      max_[node] += v, add_[node] += v;
      return;
    }
    const int m = (l + r) / 2;
    add(2 * node, l, m, lo, hi, v);
    add(2 * node + 1, m, r, lo, hi, v);
    max_[node] = std::max(max_[2 * node], max_[2 * node + 1]) + add_[node];
  }
  int64_t max(int node, int l, int r, int lo, int hi) const {
    if (hi <= l || r <= lo) return INT64_MIN;
    if (lo <= l && r <= hi) return max_[node];
    const int m = (l + r) / 2;
    return std::max(max(2 * node, l, m, lo, hi), max(2 * node + 1, m, r, lo, hi)) + add_[node];
  }
  int n_;
  std::vector<int64_t> max_, add_;
};

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
  Search(const Reduced& r, const Peeling& peel, uint64_t seed, int thread)
      : r_(r), peel_(peel), rng_(seed * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull * (thread + 1)),
        prices_(r.segments, 0.0), tree_(r.segments) {
    price_unit_ = typical_price();
  }

  // One round: solve with the current memory prices, update the prices from
  // the memory that solution uses, then make it fit and improve it.
  bool round(std::vector<int>& s, __int128& cost, int64_t& peak, const Clock::time_point deadline) {
    priced_solve(s);
    update_prices(usage_profile(s));
    if (!repair(s, deadline)) return false;
    improve(s, deadline);
    cost = true_cost(s);
    peak = tree_.max();
    return true;
  }

 private:
  double typical_price() {
    std::vector<double> ratios;
    for (int v = 0; v < r_.vars && ratios.size() < 100000; ++v)
      for (int a = 0; a + 1 < r_.dom(v); ++a) {
        int64_t du = 0;
        for (const MemTerm& m : r_.mem[v]) du += std::llabs(m.usage[a] - m.usage[a + 1]);
        const int64_t ca = r_.cost[v][a], cb = r_.cost[v][a + 1];
        if (du > 0 && ca < kInf && cb < kInf) ratios.push_back(double(std::llabs(ca - cb)) / double(du));
      }
    if (ratios.empty()) return 1.0;
    std::nth_element(ratios.begin(), ratios.begin() + ratios.size() / 2, ratios.end());
    return std::max(1e-12, ratios[ratios.size() / 2]);
  }

  // ---- the priced problem ----

  void priced_solve(std::vector<int>& s) {
    std::vector<double> prefix(r_.segments + 1, 0.0);
    for (int t = 0; t < r_.segments; ++t) prefix[t + 1] = prefix[t] + prices_[t];
    total_.assign(r_.vars, {});
    for (int v = 0; v < r_.vars; ++v) {
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
      const Neighbor& nb = r_.adj[u][peel_.parent_edge[u]];
      choice_[u].resize(r_.dom(p));
      for (int kp = 0; kp < r_.dom(p); ++kp) {
        double best = 1e300;
        int arg = 0;
        for (int x = 0; x < r_.dom(u); ++x) {
          const double c = total_[u][x] + value_of(r_.edge_cost(nb, x, kp));
          if (c < best) best = c, arg = x;
        }
        total_[p][kp] += best;
        choice_[u][kp] = arg;
      }
    }
    if (s.size() != size_t(r_.vars)) {
      s.assign(r_.vars, 0);
      for (int v : peel_.core_vars) s[v] = best_alone(v);
    }
    // A fresh start from belief propagation; keep whichever descends lower.
    std::vector<int> fresh = s;
    belief_propagation(fresh);
    core_descent(s);
    tree_descent(s);
    core_descent(fresh);
    tree_descent(fresh);
    if (std::getenv("SOLVER_DEBUG"))
      fprintf(stderr, "priced core: kept %.6g  bp %.6g\n", core_objective(s), core_objective(fresh));
    if (core_objective(fresh) < core_objective(s)) s = fresh;
    for (auto it = peel_.order.rbegin(); it != peel_.order.rend(); ++it) {
      const int u = *it, p = peel_.parent[u];
      s[u] = p >= 0 ? choice_[u][s[p]]
                    : int(std::min_element(total_[u].begin(), total_[u].end()) - total_[u].begin());
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
  void belief_propagation(std::vector<int>& s) {
    const std::vector<int>& core = peel_.core_vars;
    // msg[v][e]: the message from neighbour adj[v][e] into v, per value of v.
    std::vector<std::vector<std::vector<double>>> msg(r_.vars);
    for (int v : core) {
      msg[v].resize(r_.adj[v].size());
      for (int e : peel_.core_adj[v]) msg[v][e].assign(r_.dom(v), 0.0);
    }
    std::vector<int> order = core;
    std::vector<double> belief, out;
    for (int sweep = 0; sweep < 30; ++sweep) {
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
          for (int x = 0; x < r_.dom(u); ++x) {
            const double base = belief[x] - msg[u][e][x];
            for (int y = 0; y < r_.dom(v); ++y)
              out[y] = std::min(out[y], base + value_of(r_.edge_cost(nb, x, y)));
          }
          const double lowest = *std::min_element(out.begin(), out.end());
          std::vector<double>& m = msg[v][back];
          for (int y = 0; y < r_.dom(v); ++y) m[y] = 0.5 * m[y] + 0.5 * std::min(out[y] - lowest, 1e29);
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
    double c = total_[v][x];
    for (int e : peel_.core_adj[v]) {
      const Neighbor& nb = r_.adj[v][e];
      c += value_of(r_.edge_cost(nb, x, s[nb.var]));
    }
    return c;
  }

  void core_descent(std::vector<int>& s) {
    std::vector<int> order = peel_.core_vars;
    for (int pass = 0; pass < 100; ++pass) {
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
  void tree_descent(std::vector<int>& s) {
    const std::vector<int>& core = peel_.core_vars;
    if (core.empty()) return;
    std::vector<int> stamp_of(r_.vars, 0), pos(r_.vars, -1);
    int stale = 0, stamp = 0;
    const int patience = std::max<int>(30, static_cast<int>(core.size()) / 2);
    std::vector<int> region, parent, parent_edge;
    std::vector<std::vector<double>> tot;
    std::vector<std::vector<int>> arg;
    while (stale < patience) {
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
        const int x = region[q], p = parent[q], px = region[p];
        const Neighbor& nb = r_.adj[x][parent_edge[q]];
        arg[q].resize(r_.dom(px));
        for (int kp = 0; kp < r_.dom(px); ++kp) {
          double best = 1e300;
          int a = 0;
          for (int j = 0; j < r_.dom(x); ++j) {
            const double c = tot[q][j] + value_of(r_.edge_cost(nb, j, kp));
            if (c < best) best = c, a = j;
          }
          tot[p][kp] += best;
          arg[q][kp] = a;
        }
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

  // Prices rise where memory overflows, in proportion to the overflow, and
  // decay where there is room.
  void update_prices(const std::vector<int64_t>& profile) {
    if (r_.limit == kInf) return;
    const double limit = double(std::max<int64_t>(1, r_.limit));
    for (int t = 0; t < r_.segments; ++t) {
      const double over = (double(profile[t]) - limit) / limit;
      if (over > 0)
        prices_[t] += price_unit_ * std::min(1.0, 10 * over) + prices_[t] * std::min(1.0, 2 * over);
      else
        prices_[t] *= 0.9;
    }
  }

  // ---- the true problem ----

  __int128 true_cost(const std::vector<int>& s) const {
    __int128 total = r_.constant;
    for (int v = 0; v < r_.vars; ++v) {
      total += r_.cost[v][s[v]];
      for (const Neighbor& nb : r_.adj[v])
        if (nb.row) total += r_.edge_cost(nb, s[v], s[nb.var]);
    }
    return total;
  }

  int64_t delta_cost(int v, int x, const std::vector<int>& s) const {
    if (r_.cost[v][x] >= kInf) return kInf;
    int64_t d = r_.cost[v][x] - std::min(r_.cost[v][s[v]], kInf / 4);
    for (const Neighbor& nb : r_.adj[v]) {
      const int64_t then = r_.edge_cost(nb, x, s[nb.var]);
      if (then >= kInf) return kInf;
      d += then - std::min(r_.edge_cost(nb, s[v], s[nb.var]), kInf / 4);
    }
    return d;
  }

  void apply_memory(int v, int from, int to) {
    for (const MemTerm& m : r_.mem[v]) tree_.add(m.lo, m.hi, m.usage[to] - m.usage[from]);
  }

  void load_tree(const std::vector<int>& s) {
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
    for (int v = 0; v < r_.vars; ++v)
      for (const MemTerm& m : r_.mem[v])
        if (m.lo <= t && t < m.hi) {
          live.push_back(v);
          break;
        }
    return live_cache_[t] = std::move(live);
  }

  int64_t usage_at(int v, int x, int t) const {
    int64_t u = 0;
    for (const MemTerm& m : r_.mem[v])
      if (m.lo <= t && t < m.hi) u += m.usage[x];
    return u;
  }

  // Moves that free memory at the peak, cheapest per byte freed first,
  // until the limit holds (a move may not raise the peak elsewhere above it).
  bool repair(std::vector<int>& s, const Clock::time_point deadline) {
    load_tree(s);
    if (r_.limit == kInf) return true;
    int guard = 0;
    while (tree_.max() > r_.limit) {
      if ((++guard & 63) == 0 && Clock::now() > deadline) return false;
      const int t = tree_.argmax();
      double best = 1e300;
      int bv = -1, bx = -1;
      for (int v : live_at(t)) {
        const int64_t now = usage_at(v, s[v], t);
        for (int x = 0; x < r_.dom(v); ++x) {
          const int64_t freed = now - usage_at(v, x, t);
          if (freed <= 0) continue;
          const int64_t d = delta_cost(v, x, s);
          if (d >= kInf / 2) continue;
          const double score = double(d) / double(freed);
          if (score < best) best = score, bv = v, bx = x;
        }
      }
      if (bv < 0) return false;
      apply_memory(bv, s[bv], bx);
      s[bv] = bx;
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
  void improve(std::vector<int>& s, const Clock::time_point deadline) {
    std::vector<int> order(r_.vars);
    std::iota(order.begin(), order.end(), 0);
    for (int pass = 0; pass < 50; ++pass) {
      std::shuffle(order.begin(), order.end(), rng_);
      bool changed = false;
      for (int v : order) {
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
      if (!changed || Clock::now() > deadline) break;
    }
  }

  const Reduced& r_;
  const Peeling& peel_;
  std::mt19937_64 rng_;
  std::vector<double> prices_;
  double price_unit_ = 1;
  MaxTree tree_;
  std::vector<std::vector<double>> total_;
  std::vector<std::vector<int>> choice_;
  std::map<int, std::vector<int>> live_cache_;
};

struct Shared {
  std::mutex mu;
  std::vector<int> best;
  __int128 cost = 0;
  int64_t peak = 0;
  bool have = false;
  int thread = 0;
};

std::vector<int> expand(const Reduced& r, const std::vector<int>& s) {
  std::vector<int> out(r.var_of.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = r.var_of[i] < 0 ? r.strategy_of[i][0] : r.strategy_of[i][s[r.var_of[i]]];
  return out;
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
  // The smallest usage of every node at once: if even that overflows,
  // nothing fits.
  std::vector<int> smallest(n);
  for (int i = 0; i < n; ++i)
    smallest[i] = int(std::min_element(problem.nodes[i].usage.begin(), problem.nodes[i].usage.end()) -
                      problem.nodes[i].usage.begin());
  if (problem.usage_limit && n > 0 && problem.peak_usage(smallest) > *problem.usage_limit) {
    result.strategy = smallest;
    result.cost = problem.cost(smallest);
    result.peak_usage = problem.peak_usage(smallest);
    result.proven_infeasible = true;
    result.why = cat("no assignment fits: the smallest usages alone peak at ", result.peak_usage,
                     ", above the limit of ", *problem.usage_limit);
    return result;
  }
  const Reduced reduced = reduce(problem);
  if (reduced.infeasible) {
    result.strategy = smallest;
    result.cost = problem.cost(smallest);
    result.proven_infeasible = true;
    result.why = reduced.why;
    return result;
  }
  const Peeling peeling = peel(reduced);
  if (std::getenv("SOLVER_DEBUG")) {
    size_t edges = reduced.edges.size(), maxdom = 0;
    for (int v = 0; v < reduced.vars; ++v) maxdom = std::max<size_t>(maxdom, reduced.dom(v));
    fprintf(stderr, "reduced: %d nodes -> %d variables, %zu edges, core %zu, max domain %zu, segments %d\n",
            n, reduced.vars, edges, peeling.core_vars.size(), maxdom, reduced.segments);
  }
  Shared shared;
  std::atomic<int64_t> rounds{0};
  auto worker = [&](int thread) {
    Search search(reduced, peeling, options.seed, thread);
    std::vector<int> s;
    for (int64_t round = 0; options.max_rounds == 0 || round < options.max_rounds; ++round) {
      if (Clock::now() > deadline && round > 0) break;
      __int128 cost = 0;
      int64_t peak = 0;
      const bool ok = search.round(s, cost, peak, deadline);
      ++rounds;
      if (!ok) continue;
      std::lock_guard<std::mutex> lock(shared.mu);
      if (!shared.have || cost < shared.cost || (cost == shared.cost && thread < shared.thread)) {
        shared.have = true;
        shared.best = s;
        shared.cost = cost;
        shared.peak = peak;
        shared.thread = thread;
        if (options.on_improvement) options.on_improvement({elapsed(), cost, peak, round});
      }
    }
  };
  const int threads = std::max(1, options.threads);
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker, t);
  worker(0);
  for (auto& t : pool) t.join();
  result.seconds = elapsed();
  result.rounds = rounds;
  if (!shared.have) {
    result.strategy = smallest;
    result.cost = problem.cost(smallest);
    result.why = "no feasible assignment found in the time given";
    return result;
  }
  result.strategy = expand(reduced, shared.best);
  result.cost = problem.cost(result.strategy);
  result.peak_usage = problem.peak_usage(result.strategy);
  result.feasible = problem.feasible(result.strategy);
  AS_CHECK(result.cost == shared.cost, "internal: the solver's cost ", to_string(shared.cost),
           " differs from the problem's ", to_string(result.cost));
  if (!result.feasible) result.why = "internal: the answer breaks the problem's constraints";
  return result;
}

}  // namespace autoshard
