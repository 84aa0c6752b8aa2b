// ShardingProblem: the question a sharding planner answers, as data. Pick one
// strategy per node so that the sum of the chosen node costs and of the edge
// costs of the chosen pairs is smallest, while at every time step the usages
// of the nodes live then (half-open intervals) stay within the usage limit.
//
// This is XLA's auto-sharding problem exactly as the IOPDDL contest (ASPLOS
// 2025) published it: AutoShard builds one for a model and mesh, and
// `autoshard solve` reads (and `autoshard plan --export-problem` writes) the
// contest's JSON format, so the solver is measured on problems nobody here
// wrote.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace autoshard {

// Costs at or above this mark forbidden choices (the contest uses ~1e18).
constexpr int64_t kForbiddenCost = int64_t{500'000'000'000'000'000};

struct ShardingProblem {
  struct Node {
    int64_t lo = 0, hi = 0;      // live over [lo, hi); empty when lo >= hi
    std::vector<int64_t> cost;   // per strategy
    std::vector<int64_t> usage;  // per strategy, while live
  };
  struct Edge {
    int u = 0, v = 0;
    std::vector<int64_t> cost;  // |S_u| x |S_v|, row-major: s_u * |S_v| + s_v
  };

  std::string name;
  std::vector<Node> nodes;
  std::vector<Edge> edges;
  std::optional<int64_t> usage_limit;  // none: memory unconstrained

  // The contest's JSON (plain or gzip-compressed, by content), a regular
  // file streamed with bounds on its text and on the memory its numbers
  // take (see problem_reader.cc). Throws autoshard::Error naming the file
  // and what is malformed: a document that is not {"problem": {...}}, a
  // list that is missing or holds what is not an integer, a usage limit
  // that is not an integer, no nodes.
  static ShardingProblem read(const std::string& path);
  static ShardingProblem parse(const std::string& json, const std::string& source);
  std::string to_json() const;
  void write(const std::string& path) const;

  // Checks sizes and indices (a problem built in code, or read).
  void validate(const std::string& source) const;

  // The total cost of an assignment (one strategy index per node), exact in
  // 128 bits; forbidden choices count at their (huge) cost.
  __int128 cost(const std::vector<int>& strategy) const;
  // The largest total usage over time, exact in 128 bits (usages of many
  // nodes can sum past 2^63), and the same saturated at INT64_MAX.
  __int128 exact_peak_usage(const std::vector<int>& strategy) const;
  int64_t peak_usage(const std::vector<int>& strategy) const;
  bool feasible(const std::vector<int>& strategy) const;
};

// A 128-bit integer in decimal.
std::string to_string(__int128 v);

}  // namespace autoshard
