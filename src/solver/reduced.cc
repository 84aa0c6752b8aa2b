#include "solver/reduced.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>

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

}  // namespace

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
      for (int j = 0; j < ku; ++j)
        cost[e.u][j] = sat_add(cost[e.u][j], finite(e.cost[size_t(j) * ku + j]));
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
  auto seg = [&](int64_t t) {
    return int(std::lower_bound(points.begin(), points.end(), t) - points.begin());
  };
  const auto usage = memory_units(p, r);
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

  // Edges between variables (or into one variable's costs, or constant).
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
  return r;
}

std::vector<int> expand(const Reduced& r, const std::vector<int>& s) {
  std::vector<int> out(r.var_of.size());
  for (size_t i = 0; i < out.size(); ++i)
    out[i] = r.var_of[i] < 0 ? r.strategy_of[i][0] : r.strategy_of[i][s[r.var_of[i]]];
  return out;
}

}  // namespace autoshard::solver
