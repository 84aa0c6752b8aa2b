#include "solver/reduced.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

#include "autoshard/error.h"

namespace autoshard::solver {
namespace {

int64_t finite(int64_t c) {
  return c >= kForbiddenCost ? kInf : c;
}

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

// Chooses the unit of memory (Reduced::usage_shift) and the limit in it,
// and returns the conversion of a usage to that unit. The usages of all
// live nodes together bound every sum the solver makes (a profile, a
// move's change); in 128 bits they cannot overflow.
std::function<int64_t(int64_t)> memory_units(const ShardingProblem& p, Reduced& r) {
  unsigned __int128 most = 0;
  for (const auto& node : p.nodes)
    if (node.lo < node.hi) most += *std::max_element(node.usage.begin(), node.usage.end());
  int shift = 0;
  const unsigned __int128 room = uint64_t{1} << 60;
  while ((most >> shift) + p.nodes.size() > room) ++shift;
  r.usage_shift = shift;
  // A limit at or above every node's largest usage at once never binds.
  if (p.usage_limit && static_cast<unsigned __int128>(*p.usage_limit) < most)
    r.limit = *p.usage_limit >> shift;
  const int64_t round_up = (int64_t{1} << shift) - 1;
  return [shift, round_up](int64_t u) {
    return static_cast<int64_t>((static_cast<unsigned __int128>(u) + round_up) >> shift);
  };
}

// The problem's node costs (forbidden: kInf, self-edges added) and its
// edges between two different nodes, merged per pair.
struct MergedEdges {
  std::vector<std::vector<int64_t>> cost;                   // per node, per strategy
  std::vector<PairEdge> pairs;                              //
  std::vector<std::vector<std::pair<int, bool>>> node_adj;  // per node: (pair, is a)

  int other(int k, bool is_a) const { return is_a ? pairs[k].b : pairs[k].a; }
  int64_t entry(int k, bool is_a, int mine, int theirs) const {
    return is_a ? pairs[k].m.at(mine, theirs) : pairs[k].m.at(theirs, mine);
  }
};

MergedEdges merge_edges(const ShardingProblem& p) {
  const int n = static_cast<int>(p.nodes.size());
  MergedEdges g;
  g.cost.resize(n);
  for (int i = 0; i < n; ++i)
    for (int64_t c : p.nodes[i].cost) g.cost[i].push_back(finite(c));
  std::map<std::pair<int, int>, int> index;
  for (const auto& e : p.edges) {
    const int ku = static_cast<int>(p.nodes[e.u].cost.size());
    const int kv = static_cast<int>(p.nodes[e.v].cost.size());
    if (e.u == e.v) {
      for (int j = 0; j < ku; ++j)
        g.cost[e.u][j] = sat_add(g.cost[e.u][j], finite(e.cost[size_t(j) * ku + j]));
      continue;
    }
    const int a = std::min(e.u, e.v), b = std::max(e.u, e.v);
    auto [it, fresh] = index.emplace(std::make_pair(a, b), int(g.pairs.size()));
    if (fresh) {
      const int ka = a == e.u ? ku : kv, kb = a == e.u ? kv : ku;
      g.pairs.push_back({a, b, {ka, kb, std::vector<int64_t>(size_t(ka) * kb, 0)}});
    }
    Matrix& m = g.pairs[it->second].m;
    for (int ju = 0; ju < ku; ++ju)
      for (int jv = 0; jv < kv; ++jv) {
        int64_t& cell = e.u == a ? m.at(ju, jv) : m.at(jv, ju);
        cell = sat_add(cell, finite(e.cost[size_t(ju) * kv + jv]));
      }
  }
  g.node_adj.resize(n);
  for (size_t k = 0; k < g.pairs.size(); ++k) {
    g.node_adj[g.pairs[k].a].push_back({int(k), true});
    g.node_adj[g.pairs[k].b].push_back({int(k), false});
  }
  return g;
}

// Arc consistency on forbidden choices: a strategy stays only if every
// neighbour has some allowed strategy the edge does not forbid with it.
// Per node, per strategy: allowed.
std::vector<std::vector<char>> allowed_strategies(const MergedEdges& g) {
  const int n = static_cast<int>(g.cost.size());
  std::vector<std::vector<char>> allowed(n);
  for (int i = 0; i < n; ++i) {
    allowed[i].resize(g.cost[i].size());
    for (size_t j = 0; j < g.cost[i].size(); ++j) allowed[i][j] = g.cost[i][j] < kInf;
  }
  std::vector<int> queue(n);
  std::iota(queue.begin(), queue.end(), 0);
  std::vector<char> queued(n, 1);
  while (!queue.empty()) {
    const int i = queue.back();
    queue.pop_back();
    queued[i] = 0;
    for (auto [k, is_a] : g.node_adj[i]) {
      const int x = g.other(k, is_a);
      bool pruned = false;
      for (size_t jx = 0; jx < allowed[x].size(); ++jx) {
        if (!allowed[x][jx]) continue;
        bool supported = false;
        for (size_t j = 0; j < allowed[i].size() && !supported; ++j)
          supported = allowed[i][j] && g.entry(k, is_a, int(j), int(jx)) < kInf;
        if (!supported) allowed[x][jx] = 0, pruned = true;
      }
      if (pruned && !queued[x]) queued[x] = 1, queue.push_back(x);
    }
  }
  return allowed;
}

// Nodes tied by one-to-one edges (on the allowed strategies): each member's
// strategy as a function of its group root's value.
struct TiedGroups {
  std::vector<char> one_to_one;           // per pair
  std::vector<std::vector<int>> members;  // per root (empty: not a root)
  std::vector<std::vector<int>> map_of;   // per node: root value -> own strategy (-1: none)
  std::vector<int> root_of;               // per node
};

std::vector<char> one_to_one_pairs(const MergedEdges& g,
                                   const std::vector<std::vector<char>>& allowed) {
  std::vector<char> one_to_one(g.pairs.size(), 0);
  for (size_t k = 0; k < g.pairs.size(); ++k) {
    const PairEdge& e = g.pairs[k];
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
    one_to_one[k] = ok;
  }
  return one_to_one;
}

// Maps the group of `root` (BFS over the one-to-one edges from the root),
// then drops the root values some member cannot follow or some inner edge
// forbids. False when no root value is left.
bool map_group(const MergedEdges& g, const std::vector<std::vector<char>>& allowed, int root,
               UnionFind& groups, TiedGroups& t) {
  const int kr = static_cast<int>(g.cost[root].size());
  t.map_of[root].assign(kr, -1);
  for (int j = 0; j < kr; ++j)
    if (allowed[root][j]) t.map_of[root][j] = j;
  std::vector<int> bfs{root};
  t.root_of[root] = root;
  std::map<int, bool> visited{{root, true}};
  for (size_t q = 0; q < bfs.size(); ++q) {
    const int x = bfs[q];
    for (auto [k, is_a] : g.node_adj[x]) {
      if (!t.one_to_one[k]) continue;
      const int y = g.other(k, is_a);
      if (visited.count(y)) continue;
      visited[y] = true;
      t.root_of[y] = root;
      t.map_of[y].assign(kr, -1);
      for (int j = 0; j < kr; ++j) {
        const int jx = t.map_of[x][j];
        if (jx < 0) continue;
        for (size_t jy = 0; jy < g.cost[y].size(); ++jy)
          if (allowed[y][jy] && g.entry(k, is_a, jx, int(jy)) < kInf) t.map_of[y][j] = int(jy);
      }
      bfs.push_back(y);
    }
  }
  // Root values every member can follow, and every inner edge allows.
  std::vector<char> keep(kr, 1);
  for (int m : t.members[root])
    for (int j = 0; j < kr; ++j)
      if (t.map_of[m][j] < 0) keep[j] = 0;
  for (int m : t.members[root])
    for (auto [k, is_a] : g.node_adj[m]) {
      const int y = g.other(k, is_a);
      if (!is_a || groups.find(y) != root) continue;
      for (int j = 0; j < kr; ++j)
        if (keep[j] && g.pairs[k].m.at(t.map_of[m][j], t.map_of[y][j]) >= kInf) keep[j] = 0;
    }
  for (int m : t.members[root])
    for (int j = 0; j < kr; ++j)
      if (!keep[j]) t.map_of[m][j] = -1;
  return std::find(keep.begin(), keep.end(), 1) != keep.end();
}

// The tied groups, or nullopt (r.infeasible set, r.why said) when some
// group allows no common strategy.
std::optional<TiedGroups> tie_groups(const MergedEdges& g,
                                     const std::vector<std::vector<char>>& allowed, Reduced& r) {
  const int n = static_cast<int>(g.cost.size());
  TiedGroups t;
  t.one_to_one = one_to_one_pairs(g, allowed);
  UnionFind groups(n);
  for (size_t k = 0; k < g.pairs.size(); ++k)
    if (t.one_to_one[k]) groups.unite(g.pairs[k].a, g.pairs[k].b);
  t.members.resize(n);
  for (int i = 0; i < n; ++i) t.members[groups.find(i)].push_back(i);
  t.map_of.resize(n);
  t.root_of.resize(n);
  for (int root = 0; root < n; ++root) {
    if (t.members[root].empty() || map_group(g, allowed, root, groups, t)) continue;
    r.infeasible = true;
    r.why = cat("nodes tied to node ", root, " by one-to-one edges allow no common strategy");
    return std::nullopt;
  }
  return t;
}

// Variables: groups with a choice left. Values: the kept root values.
// Fills r.vars, r.var_of and r.strategy_of; returns each variable's root
// and (per root) its kept values.
std::pair<std::vector<int>, std::vector<std::vector<int>>> choose_variables(const TiedGroups& t,
                                                                            Reduced& r) {
  const int n = static_cast<int>(t.members.size());
  std::vector<std::vector<int>> values(n);  // per root: its kept values
  r.var_of.assign(n, -1);
  std::vector<int> var_root;
  for (int root = 0; root < n; ++root) {
    if (t.members[root].empty()) continue;
    for (int j = 0; j < int(t.map_of[root].size()); ++j)
      if (t.map_of[root][j] >= 0) values[root].push_back(j);
    if (values[root].size() > 1) {
      const int v = static_cast<int>(var_root.size());
      var_root.push_back(root);
      for (int m : t.members[root]) r.var_of[m] = v;
    }
  }
  r.vars = static_cast<int>(var_root.size());
  r.strategy_of.resize(n);
  for (int i = 0; i < n; ++i)
    for (int j : values[t.root_of[i]]) r.strategy_of[i].push_back(t.map_of[i][j]);
  return {var_root, values};
}

// Node costs and memory into the variables (fixed nodes: into the constant
// and the base profile). Time is cut only where an interval starts or ends.
void fold_nodes(const ShardingProblem& p, const std::vector<std::vector<int64_t>>& cost,
                const std::vector<int>& var_root, const std::vector<std::vector<int>>& values,
                Reduced& r) {
  std::vector<int64_t> points;
  for (const auto& node : p.nodes)
    if (node.lo < node.hi) points.push_back(node.lo), points.push_back(node.hi);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  r.segments = std::max<int>(1, int(points.size()) - 1);
  auto seg = [&](int64_t t) {
    return int(std::lower_bound(points.begin(), points.end(), t) - points.begin());
  };
  const auto usage = memory_units(p, r);
  r.base.assign(r.segments + 1, 0);

  r.cost.resize(r.vars);
  r.mem.resize(r.vars);
  for (int v = 0; v < r.vars; ++v) r.cost[v].assign(values[var_root[v]].size(), 0);
  std::vector<std::map<std::pair<int, int>, int>> term_index(r.vars);
  for (int i = 0; i < int(p.nodes.size()); ++i) {
    const int v = r.var_of[i];
    const auto& node = p.nodes[i];
    if (v < 0) {
      const int j = r.strategy_of[i][0];
      r.constant = sat_add(r.constant, cost[i][j]);
      if (node.lo < node.hi)
        r.base[seg(node.lo)] += usage(node.usage[j]), r.base[seg(node.hi)] -= usage(node.usage[j]);
      continue;
    }
    for (size_t x = 0; x < r.cost[v].size(); ++x)
      r.cost[v][x] = sat_add(r.cost[v][x], cost[i][r.strategy_of[i][x]]);
    if (node.lo >= node.hi) continue;
    const std::pair<int, int> key{seg(node.lo), seg(node.hi)};
    auto [it, fresh] = term_index[v].emplace(key, int(r.mem[v].size()));
    if (fresh)
      r.mem[v].push_back({key.first, key.second, std::vector<int64_t>(r.cost[v].size(), 0)});
    for (size_t x = 0; x < r.cost[v].size(); ++x)
      r.mem[v][it->second].usage[x] += usage(node.usage[r.strategy_of[i][x]]);
  }
  for (int t = 1; t <= r.segments; ++t) r.base[t] += r.base[t - 1];
}

// Edges between variables (or into one variable's costs, or the constant).
void fold_edges(const std::vector<PairEdge>& pairs, Reduced& r) {
  std::map<std::pair<int, int>, int> var_edges;
  for (const PairEdge& e : pairs) {
    const int va = r.var_of[e.a], vb = r.var_of[e.b];
    const auto& sa = r.strategy_of[e.a];
    const auto& sb = r.strategy_of[e.b];
    if (va >= 0 && va == vb) {
      for (size_t x = 0; x < sa.size(); ++x)
        r.cost[va][x] = sat_add(r.cost[va][x], e.m.at(sa[x], sb[x]));
    } else if (va < 0 && vb < 0) {
      r.constant = sat_add(r.constant, e.m.at(sa[0], sb[0]));
    } else if (va < 0) {
      for (size_t x = 0; x < sb.size(); ++x)
        r.cost[vb][x] = sat_add(r.cost[vb][x], e.m.at(sa[0], sb[x]));
    } else if (vb < 0) {
      for (size_t x = 0; x < sa.size(); ++x)
        r.cost[va][x] = sat_add(r.cost[va][x], e.m.at(sa[x], sb[0]));
    } else {
      const int lo = std::min(va, vb), hi = std::max(va, vb);
      auto [it, fresh] = var_edges.emplace(std::make_pair(lo, hi), int(r.edges.size()));
      if (fresh)
        r.edges.push_back(
            {r.dom(lo), r.dom(hi), std::vector<int64_t>(size_t(r.dom(lo)) * r.dom(hi), 0)});
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
}

}  // namespace

Reduced reduce(const ShardingProblem& p) {
  Reduced r;
  const MergedEdges g = merge_edges(p);
  const std::vector<std::vector<char>> allowed = allowed_strategies(g);
  for (int i = 0; i < int(allowed.size()); ++i)
    if (std::find(allowed[i].begin(), allowed[i].end(), 1) == allowed[i].end()) {
      r.infeasible = true;
      r.why = cat("node ", i, ": every strategy is forbidden, by its own cost or its edges");
      return r;
    }
  const std::optional<TiedGroups> tied = tie_groups(g, allowed, r);
  if (!tied) return r;
  const auto [var_root, values] = choose_variables(*tied, r);
  fold_nodes(p, g.cost, var_root, values, r);
  fold_edges(g.pairs, r);
  return r;
}

__int128 peak_floor(const ShardingProblem& p, const Reduced& r) {
  std::vector<int64_t> points;
  for (const auto& node : p.nodes)
    if (node.lo < node.hi) points.push_back(node.lo), points.push_back(node.hi);
  if (points.empty()) return 0;
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  const auto seg = [&](int64_t t) {
    return int(std::lower_bound(points.begin(), points.end(), t) - points.begin());
  };
  // Per segment, the change of the floor there (summed up at the end).
  std::vector<__int128> change(points.size() + 1, 0);
  // Per variable: its nodes coming (+) and going (-), by segment.
  std::vector<std::vector<std::tuple<int, bool, int>>> events(r.vars);
  for (int i = 0; i < int(p.nodes.size()); ++i) {
    const auto& node = p.nodes[i];
    if (node.lo >= node.hi) continue;
    const int v = r.var_of[i];
    if (v < 0) {  // fixed: its one strategy
      const int64_t u = node.usage[r.strategy_of[i][0]];
      change[seg(node.lo)] += u, change[seg(node.hi)] -= u;
      continue;
    }
    events[v].push_back({seg(node.lo), true, i});
    events[v].push_back({seg(node.hi), false, i});
  }
  // Each variable's nodes live at once change only at their events: between
  // two, the floor holds the least of their sums over its values.
  for (int v = 0; v < r.vars; ++v) {
    std::sort(events[v].begin(), events[v].end());
    std::vector<__int128> sum(r.dom(v), 0);
    __int128 held = 0;
    for (size_t e = 0; e < events[v].size();) {
      const int at = std::get<0>(events[v][e]);
      for (; e < events[v].size() && std::get<0>(events[v][e]) == at; ++e) {
        const auto [t, comes, i] = events[v][e];
        for (int x = 0; x < r.dom(v); ++x) {
          const int64_t u = p.nodes[i].usage[r.strategy_of[i][x]];
          sum[x] += comes ? u : -u;
        }
      }
      const __int128 least = *std::min_element(sum.begin(), sum.end());
      change[at] += least - held;
      held = least;
    }
  }
  __int128 floor = 0, now = 0;
  for (const __int128 c : change) floor = std::max(floor, now += c);
  return floor;
}

std::vector<int> expand(const Reduced& r, const std::vector<int>& s) {
  std::vector<int> out(r.var_of.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = r.var_of[i] < 0 ? r.strategy_of[i][0] : r.strategy_of[i][s[r.var_of[i]]];
  return out;
}

}  // namespace autoshard::solver
