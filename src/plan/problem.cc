#include "autoshard/plan/problem.h"

#include <zlib.h>

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

namespace {

// Reads a whole file, inflating it when it is gzip-compressed.
std::string read_file(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  AS_CHECK(f != nullptr, "cannot open problem '", path, "'");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  const bool failed = n < 0;
  gzclose(f);
  AS_CHECK(!failed, "problem '", path, "' is not readable (a damaged gzip file?)");
  return out;
}

// A SAX reader for the contest format: fills the problem while parsing, with
// no document tree (problems run to 100 MB of JSON).
class ProblemReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit ProblemReader(ShardingProblem& p) : p_(p) {}

  bool key(string_t& k) override {
    keys_.resize(depth_ - 1);
    keys_.push_back(k);
    return true;
  }
  bool start_object(std::size_t) override {
    ++depth_;
    return true;
  }
  bool end_object() override {
    --depth_;
    keys_.resize(std::min<size_t>(keys_.size(), depth_));
    return true;
  }
  bool start_array(std::size_t) override {
    ++arrays_;
    if (arrays_ == 2) row_.clear();
    return true;
  }
  bool end_array() override {
    if (arrays_ == 2) finish_row();
    --arrays_;
    return true;
  }
  bool number_integer(number_integer_t v) override { return number(static_cast<int64_t>(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<uint64_t>(INT64_MAX)) return bad("a number above 2^63");
    return number(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t&) override {
    // Some writers print integral values as floats (1e18).
    if (!(v >= -9.2e18 && v <= 9.2e18) || v != static_cast<double>(static_cast<int64_t>(v)))
      return bad("a number that is not an integer");
    return number(static_cast<int64_t>(v));
  }
  bool string(string_t& s) override {
    if (section() == "name") p_.name = s;
    return true;
  }
  bool boolean(bool) override { return true; }
  bool null() override { return true; }
  bool binary(binary_t&) override { return true; }
  bool parse_error(std::size_t at, const std::string&,
                   const nlohmann::detail::exception& e) override {
    error_ = cat("invalid JSON at byte ", at, " (", e.what(), ")");
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  // "nodes.costs", "edges.nodes", "usage_limit", ... (under "problem").
  std::string section() const {
    std::string s;
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (i == 0 && keys_[0] == "problem") continue;
      s += (s.empty() ? "" : ".") + keys_[i];
    }
    return s;
  }
  bool number(int64_t v) {
    if (arrays_ == 0) {
      if (section() == "usage_limit") p_.usage_limit = v;
      return true;
    }
    if (arrays_ == 2) row_.push_back(v);
    return true;
  }
  void finish_row() {
    const std::string s = section();
    if (s == "nodes.intervals") {
      intervals_.push_back(row_);
    } else if (s == "nodes.costs") {
      costs_.push_back(row_);
    } else if (s == "nodes.usages") {
      usages_.push_back(row_);
    } else if (s == "edges.nodes") {
      edge_nodes_.push_back(row_);
    } else if (s == "edges.costs") {
      edge_costs_.push_back(row_);
    }
  }
  bool bad(const std::string& what) {
    error_ = what;
    return false;
  }

  ShardingProblem& p_;
  size_t depth_ = 0;
  int arrays_ = 0;
  std::vector<std::string> keys_;
  std::vector<int64_t> row_;
  std::string error_;

 public:
  std::vector<std::vector<int64_t>> intervals_, costs_, usages_, edge_nodes_, edge_costs_;
};

}  // namespace

ShardingProblem ShardingProblem::parse(const std::string& json, const std::string& source) {
  ShardingProblem p;
  ProblemReader r(p);
  const bool ok = nlohmann::json::sax_parse(json, &r);
  AS_CHECK(ok, "problem '", source, "': ", r.error().empty() ? "malformed" : r.error());
  AS_CHECK(r.costs_.size() == r.intervals_.size() && r.usages_.size() == r.costs_.size(),
           "problem '", source, "': ", r.intervals_.size(), " intervals, ", r.costs_.size(),
           " cost lists and ", r.usages_.size(), " usage lists; one of each per node");
  AS_CHECK(r.edge_nodes_.size() == r.edge_costs_.size(), "problem '", source,
           "': ", r.edge_nodes_.size(), " edges but ", r.edge_costs_.size(), " edge cost lists");
  p.nodes.resize(r.costs_.size());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    AS_CHECK(r.intervals_[i].size() == 2, "problem '", source, "': interval of node ", i,
             " is not [lo, hi]");
    p.nodes[i] = {r.intervals_[i][0], r.intervals_[i][1], std::move(r.costs_[i]),
                  std::move(r.usages_[i])};
  }
  p.edges.resize(r.edge_nodes_.size());
  for (size_t i = 0; i < p.edges.size(); ++i) {
    AS_CHECK(r.edge_nodes_[i].size() == 2, "problem '", source, "': edge ", i,
             " does not name two nodes");
    AS_CHECK(r.edge_nodes_[i][0] >= 0 && r.edge_nodes_[i][0] < int64_t(p.nodes.size()) &&
                 r.edge_nodes_[i][1] >= 0 && r.edge_nodes_[i][1] < int64_t(p.nodes.size()),
             "problem '", source, "': edge ", i, " names a node that does not exist");
    p.edges[i] = {static_cast<int>(r.edge_nodes_[i][0]), static_cast<int>(r.edge_nodes_[i][1]),
                  std::move(r.edge_costs_[i])};
  }
  p.validate(source);
  return p;
}

ShardingProblem ShardingProblem::read(const std::string& path) {
  return parse(read_file(path), path);
}

void ShardingProblem::validate(const std::string& source) const {
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    AS_CHECK(!n.cost.empty(), "problem '", source, "': node ", i, " has no strategy");
    AS_CHECK(n.usage.size() == n.cost.size(), "problem '", source, "': node ", i, " has ",
             n.cost.size(), " costs but ", n.usage.size(), " usages");
    for (int64_t u : n.usage)
      AS_CHECK(u >= 0, "problem '", source, "': node ", i, " has a negative usage");
  }
  for (size_t i = 0; i < edges.size(); ++i) {
    const Edge& e = edges[i];
    AS_CHECK(e.u >= 0 && e.u < int(nodes.size()) && e.v >= 0 && e.v < int(nodes.size()),
             "problem '", source, "': edge ", i, " names a node that does not exist");
    AS_CHECK(e.cost.size() == nodes[e.u].cost.size() * nodes[e.v].cost.size(), "problem '", source,
             "': edge ", i, " (", e.u, ", ", e.v, ") has ", e.cost.size(), " costs, not ",
             nodes[e.u].cost.size(), " x ", nodes[e.v].cost.size());
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

int64_t ShardingProblem::peak_usage(const std::vector<int>& s) const {
  std::map<int64_t, int64_t> delta;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (n.lo >= n.hi) continue;
    delta[n.lo] += n.usage[s[i]];
    delta[n.hi] -= n.usage[s[i]];
  }
  int64_t cur = 0, peak = 0;
  for (const auto& [t, d] : delta) peak = std::max(peak, cur += d);
  return peak;
}

bool ShardingProblem::feasible(const std::vector<int>& s) const {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].cost[s[i]] >= kForbiddenCost) return false;
  for (const Edge& e : edges)
    if (e.cost[size_t(s[e.u]) * nodes[e.v].cost.size() + s[e.v]] >= kForbiddenCost) return false;
  return !usage_limit || peak_usage(s) <= *usage_limit;
}

}  // namespace autoshard
