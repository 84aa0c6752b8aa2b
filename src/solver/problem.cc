#include "autoshard/solver/problem.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autoshard/error.h"

namespace autoshard {

std::string to_string(__int128 v) {
  if (v == 0) return "0";
  const bool negative = v < 0;
  unsigned __int128 u = negative ? -static_cast<unsigned __int128>(v) : v;
  std::string s;
  while (u > 0) s += static_cast<char>('0' + static_cast<int>(u % 10)), u /= 10;
  if (negative) s += '-';
  return {s.rbegin(), s.rend()};
}

void ShardingProblem::validate(const std::string& source) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    AS_CHECK(!n.cost.empty(), "problem '", source, "': node ", i, " has no strategy");
    AS_CHECK(n.usage.size() == n.cost.size(), "problem '", source, "': node ", i, " has ",
             n.cost.size(), " costs but ", n.usage.size(), " usages");
    for (int64_t u : n.usage)
      AS_CHECK(u >= 0, "problem '", source, "': node ", i, " has a negative usage (", u, ")");
    // Costs are what a choice adds; a negative one is a mistake (and would
    // make the solver's sums run backwards).
    for (int64_t c : n.cost)
      AS_CHECK(c >= 0, "problem '", source, "': node ", i, " has a negative cost (", c,
               "); costs are at least 0 (", kForbiddenCost, " and above: forbidden)");
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    AS_CHECK(e.u >= 0 && e.u < int(nodes.size()) && e.v >= 0 && e.v < int(nodes.size()),
             "problem '", source, "': edge ", i, " names a node that does not exist");
    AS_CHECK(e.cost.size() == nodes[e.u].cost.size() * nodes[e.v].cost.size(), "problem '", source,
             "': edge ", i, " (", e.u, ", ", e.v, ") has ", e.cost.size(), " costs, not ",
             nodes[e.u].cost.size(), " x ", nodes[e.v].cost.size());
    for (int64_t c : e.cost)
      AS_CHECK(c >= 0, "problem '", source, "': edge ", i, " has a negative cost (", c,
               "); costs are at least 0 (", kForbiddenCost, " and above: forbidden)");
  }
  if (usage_limit) AS_CHECK(*usage_limit >= 0, "problem '", source, "': negative usage limit");
}

std::string ShardingProblem::to_json() const {
  nlohmann::json j;
  auto& p = j["problem"];
  p["name"] = name;
  nlohmann::json intervals = nlohmann::json::array(), costs = nlohmann::json::array(),
                 usages = nlohmann::json::array();
  for (const Node& n : nodes) {
    intervals.push_back({n.lo, n.hi});
    costs.push_back(n.cost);
    usages.push_back(n.usage);
  }
  p["nodes"] = {{"intervals", intervals}, {"costs", costs}, {"usages", usages}};
  nlohmann::json en = nlohmann::json::array(), ec = nlohmann::json::array();
  for (const Edge& e : edges) {
    en.push_back({e.u, e.v});
    ec.push_back(e.cost);
  }
  p["edges"] = {{"nodes", en}, {"costs", ec}};
  if (usage_limit) p["usage_limit"] = *usage_limit;
  return j.dump();
}

void ShardingProblem::write(const std::string& path) const {
  std::ofstream out(path);
  AS_CHECK(out.good(), "cannot write problem '", path, "'");
  out << to_json() << "\n";
  AS_CHECK(out.good(), "writing problem '", path, "' failed");
}

__int128 ShardingProblem::cost(const std::vector<int>& s) const {
  AS_CHECK(s.size() == nodes.size(), "an assignment of ", s.size(), " strategies for ",
           nodes.size(), " nodes");
  __int128 total = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    AS_CHECK(s[i] >= 0 && s[i] < int(nodes[i].cost.size()), "strategy ", s[i], " of node ", i,
             " does not exist");
    total += nodes[i].cost[s[i]];
  }
  for (const Edge& e : edges) total += e.cost[size_t(s[e.u]) * nodes[e.v].cost.size() + s[e.v]];
  return total;
}

__int128 ShardingProblem::exact_peak_usage(const std::vector<int>& s) const {
  // 128 bits: 2^31 nodes of usages below 2^63 cannot overflow them.
  std::map<int64_t, __int128> delta;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.lo >= n.hi) continue;
    delta[n.lo] += n.usage[s[i]];
    delta[n.hi] -= n.usage[s[i]];
  }
  __int128 cur = 0, peak = 0;
  for (const auto& [t, d] : delta) peak = std::max(peak, cur += d);
  return peak;
}

int64_t ShardingProblem::peak_usage(const std::vector<int>& s) const {
  const __int128 peak = exact_peak_usage(s);
  return peak > INT64_MAX ? INT64_MAX : static_cast<int64_t>(peak);
}

bool ShardingProblem::feasible(const std::vector<int>& s) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].cost[s[i]] >= kForbiddenCost) return false;
  for (const Edge& e : edges)
    if (e.cost[size_t(s[e.u]) * nodes[e.v].cost.size() + s[e.v]] >= kForbiddenCost) return false;
  return !usage_limit || exact_peak_usage(s) <= *usage_limit;
}

}  // namespace autoshard
