// Reading the IOPDDL contest's JSON: ShardingProblem::read and ::parse.
//
// A problem file is hostile input: it is read only if it is a regular file
// (a FIFO would block, /dev/zero never ends), streamed through zlib (plain or
// gzip, by content) straight into a SAX scanner (solver/json_scan.h) with no
// whole-text buffer, and bounded three times: at most kMaxProblemTextBytes
// of (decompressed) text, no string or number over json_scan::kMaxTokenBytes,
// and the numbers kept count against the memory available, so a gzip bomb
// ends as an error in seconds instead of taking the machine down. The structure is
// checked as it streams in: the document must be {"problem": {...}} with
// lists of lists of integers where the format has them, and an integer
// usage limit.
#include <zlib.h>

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <streambuf>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/memory_size.h"
#include "autoshard/solver/problem.h"
#include "solver/json_scan.h"

namespace autoshard {
namespace {

// The largest problem text read (decompressed). The contest's largest
// problems are a few hundred MB of JSON; more than this is a mistake or a
// bomb, and parsing it would take minutes.
constexpr uint64_t kMaxProblemTextBytes = uint64_t{4} << 30;

// Memory the parsed numbers may take: half of what is available (the
// solver's own copy needs the rest).
uint64_t number_budget() {
  const int64_t available = available_memory_bytes().value_or(int64_t{8} << 30);
  return static_cast<uint64_t>(std::max<int64_t>(available, 0)) / 2;
}

// A stream buffer over zlib (which passes plain files through), stopping
// after `max_bytes` bytes of text.
class InflatingBuffer : public std::streambuf {
 public:
  InflatingBuffer(const std::string& path, uint64_t max_bytes)
      : file_(gzopen(path.c_str(), "rb")), max_(max_bytes) {
    AS_CHECK(file_ != nullptr, "problem '", path, "' cannot be opened");
    gzbuffer(file_, 1 << 17);
  }
  ~InflatingBuffer() override { gzclose(file_); }
  InflatingBuffer(const InflatingBuffer&) = delete;
  InflatingBuffer& operator=(const InflatingBuffer&) = delete;

  bool too_long() const { return too_long_; }
  bool damaged() const { return damaged_; }

 protected:
  int_type underflow() override {
    if (too_long_ || damaged_) return traits_type::eof();
    const int n = gzread(file_, buffer_.data(), static_cast<unsigned>(buffer_.size()));
    if (n < 0) damaged_ = true;
    if (n <= 0) return traits_type::eof();
    read_ += static_cast<uint64_t>(n);
    if (read_ > max_) too_long_ = true;
    if (too_long_) return traits_type::eof();
    setg(buffer_.data(), buffer_.data(), buffer_.data() + n);
    return traits_type::to_int_type(buffer_[0]);
  }

 private:
  gzFile file_;
  uint64_t max_;
  uint64_t read_ = 0;
  bool too_long_ = false, damaged_ = false;
  std::array<char, 1 << 16> buffer_{};
};

// The lists of lists of integers the format has.
enum List { kIntervals, kCosts, kUsages, kEdgeNodes, kEdgeCosts, kLists };
const char* const kListNames[kLists] = {"nodes.intervals", "nodes.costs", "nodes.usages",
                                        "edges.nodes", "edges.costs"};

// What a position in the document must hold.
enum class Want { Document, Problem, Nodes, Edges, Rows, Row, Number, Name, Limit, Anything };

// A SAX reader that checks the structure as it streams in and keeps the
// numbers, with no document tree.
class ProblemReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit ProblemReader(uint64_t budget) : budget_(budget) {}

  std::string name;
  std::optional<int64_t> usage_limit;
  std::vector<std::vector<int64_t>> lists[kLists];
  bool seen[kLists] = {};
  bool seen_problem = false, seen_nodes = false, seen_edges = false;

  const std::string& error() const { return error_; }

  bool start_object(std::size_t) override {
    const Want w = want();
    if (w == Want::Anything) return push(Want::Anything, true);
    if (w != Want::Document && w != Want::Problem && w != Want::Nodes && w != Want::Edges)
      return mistyped("an object");
    if (w == Want::Problem) seen_problem = true;
    if (w == Want::Nodes) seen_nodes = true;
    if (w == Want::Edges) seen_edges = true;
    return push(w, true);
  }
  bool end_object() override { return pop(); }
  bool start_array(std::size_t) override {
    const Want w = want();
    if (w == Want::Anything) return push(Want::Anything, false);
    if (w == Want::Rows) {
      if (seen[pending_list_]) return bad(cat("\"", kListNames[pending_list_], "\" appears twice"));
      seen[pending_list_] = true;
      return push(Want::Rows, false);
    }
    if (w == Want::Row) {
      lists[list_].emplace_back();
      return count(48) && push(Want::Row, false);
    }
    return mistyped("a list");
  }
  bool end_array() override { return pop(); }
  bool key(string_t& k) override {
    const Want in = frames_.back().want;
    pending_ = Want::Anything;
    if (in == Want::Document && k == "problem") pending_ = Want::Problem;
    if (in == Want::Problem) {
      if (k == "name") pending_ = Want::Name;
      if (k == "nodes") pending_ = Want::Nodes;
      if (k == "edges") pending_ = Want::Edges;
      if (k == "usage_limit") pending_ = Want::Limit;
    }
    if (in == Want::Nodes || in == Want::Edges) {
      const int first = in == Want::Nodes ? kIntervals : kEdgeNodes;
      const int last = in == Want::Nodes ? kUsages : kEdgeCosts;
      for (int l = first; l <= last; ++l)
        if (k == std::string(kListNames[l]).substr(6)) pending_ = Want::Rows, pending_list_ = l;
    }
    pending_key_ = k;
    return true;
  }
  bool number_integer(number_integer_t v) override { return number(static_cast<int64_t>(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    if (want() == Want::Anything) return true;
    if (v > static_cast<uint64_t>(INT64_MAX))
      return bad(cat(where(), " holds ", v, ", above 2^63 - 1"));
    return number(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    if (want() == Want::Anything) return true;
    // Some writers print integral values as floats (1e18).
    if (!(v >= -9.2e18 && v <= 9.2e18) || v != static_cast<double>(static_cast<int64_t>(v)))
      return bad(cat(where(), " holds ", text, ", not an integer"));
    return number(static_cast<int64_t>(v));
  }
  bool string(string_t& s) override {
    const Want w = want();
    if (w == Want::Name) name = s;
    return w == Want::Name || w == Want::Anything || mistyped("a string");
  }
  bool boolean(bool) override { return want() == Want::Anything || mistyped("true or false"); }
  bool null() override { return want() == Want::Anything || mistyped("null"); }
  bool binary(binary_t&) override { return want() == Want::Anything || mistyped("binary"); }
  bool parse_error(std::size_t at, const std::string&,
                   const nlohmann::detail::exception& e) override {
    syntax_error(at, e.what());
    return false;
  }
  void syntax_error(std::size_t at, const std::string& what) {
    if (error_.empty()) error_ = cat("invalid JSON at byte ", at, " (", what, ")");
  }
  void token_too_long(std::size_t at) {
    bad(cat("holds more than ", format_bytes(double(json_scan::kMaxTokenBytes)),
            " in one string or number (at byte ", at, "); is it the right file (or a gzip bomb)?"));
  }

 private:
  struct Frame {
    Want want;
    bool object;
  };

  // What the next value must be: the document itself, the value of the last
  // key, or an element of the list being read.
  Want want() const {
    if (frames_.empty()) return Want::Document;
    const Frame& f = frames_.back();
    if (f.want == Want::Anything) return Want::Anything;
    if (f.object) return pending_;
    return f.want == Want::Rows ? Want::Row : Want::Number;
  }
  bool push(Want w, bool object) {
    if (w == Want::Rows || w == Want::Row) list_ = pending_list_;
    frames_.push_back({w, object});
    pending_ = Want::Anything;
    return count(sizeof(Frame));  // a document nested a billion deep is memory too
  }
  bool pop() {
    frames_.pop_back();
    return true;
  }
  bool number(int64_t v) {
    switch (want()) {
      case Want::Anything:
        return true;
      case Want::Number:
        lists[list_].back().push_back(v);
        return count(8);
      case Want::Limit:
        usage_limit = v;
        return true;
      default:
        return mistyped("a number");
    }
  }
  // Counts memory the numbers kept take, against the budget.
  bool count(uint64_t bytes) {
    used_ += bytes;
    if (used_ <= budget_) return true;
    return bad(cat("is too large for this machine's memory (", format_bytes(double(used_)),
                   " of numbers so far, ", format_bytes(double(budget_)),
                   " allowed: half the memory available); solve it on a larger machine"));
  }
  // Where we are, for messages: "nodes.costs[3]", "usage_limit", ...
  std::string where() const {
    const Want w = want();
    if (w == Want::Row || w == Want::Number) {
      const size_t row = lists[list_].size() - (w == Want::Number ? 1 : 0);
      return cat("\"", kListNames[list_], "\"[", row, "]");
    }
    if (frames_.empty()) return "the document";
    return cat("\"", pending_key_, "\"");
  }
  bool mistyped(const char* found) {
    const char* expected = "";
    switch (want()) {
      case Want::Document:
        expected = "an object {\"problem\": {...}}";
        break;
      case Want::Problem:
      case Want::Nodes:
      case Want::Edges:
        expected = "an object";
        break;
      case Want::Rows:
        expected = "a list of lists of integers";
        break;
      case Want::Row:
        expected = "a list of integers";
        break;
      case Want::Number:
      case Want::Limit:
        expected = "an integer";
        break;
      case Want::Name:
        expected = "a string";
        break;
      case Want::Anything:
        break;
    }
    return bad(cat(where(), " must be ", expected, ", not ", found));
  }
  bool bad(const std::string& what) {
    if (error_.empty()) error_ = what;
    return false;
  }

  uint64_t budget_, used_ = 0;
  std::vector<Frame> frames_;
  Want pending_ = Want::Anything;
  int pending_list_ = 0, list_ = 0;
  std::string pending_key_, error_;
};

// The problem the reader collected, its structure checked.
ShardingProblem assemble(ProblemReader& r, const std::string& source) {
  const std::string in = cat("problem '", source, "'");
  AS_CHECK(r.seen_problem, in, " has no \"problem\" object; is it in the IOPDDL format?");
  AS_CHECK(r.seen_nodes && r.seen_edges, in,
           " needs \"nodes\" and \"edges\" objects inside \"problem\"");
  for (int l = 0; l < kLists; ++l) AS_CHECK(r.seen[l], in, " has no \"", kListNames[l], "\" list");
  auto& intervals = r.lists[kIntervals];
  auto& costs = r.lists[kCosts];
  auto& usages = r.lists[kUsages];
  auto& edge_nodes = r.lists[kEdgeNodes];
  auto& edge_costs = r.lists[kEdgeCosts];
  AS_CHECK(costs.size() == intervals.size() && usages.size() == costs.size(), in, ": ",
           intervals.size(), " intervals, ", costs.size(), " cost lists and ", usages.size(),
           " usage lists; one of each per node");
  AS_CHECK(edge_nodes.size() == edge_costs.size(), in, ": ", edge_nodes.size(), " edges but ",
           edge_costs.size(), " edge cost lists");
  AS_CHECK(!intervals.empty(), in, " has no nodes; nothing to solve");
  AS_CHECK(intervals.size() < size_t{INT32_MAX} && edge_nodes.size() < size_t{INT32_MAX}, in,
           " has more than 2^31 nodes or edges");
  ShardingProblem p;
  p.name = std::move(r.name);
  p.usage_limit = r.usage_limit;
  p.nodes.resize(costs.size());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    AS_CHECK(intervals[i].size() == 2, in, ": interval of node ", i, " is not [lo, hi]");
    p.nodes[i] = {intervals[i][0], intervals[i][1], std::move(costs[i]), std::move(usages[i])};
  }
  p.edges.resize(edge_nodes.size());
  for (size_t i = 0; i < p.edges.size(); ++i) {
    const auto& e = edge_nodes[i];
    AS_CHECK(e.size() == 2, in, ": edge ", i, " does not name two nodes");
    AS_CHECK(
        e[0] >= 0 && e[0] < int64_t(p.nodes.size()) && e[1] >= 0 && e[1] < int64_t(p.nodes.size()),
        in, ": edge ", i, " names a node that does not exist");
    p.edges[i] = {static_cast<int>(e[0]), static_cast<int>(e[1]), std::move(edge_costs[i])};
  }
  p.validate(source);
  return p;
}

}  // namespace

// A read-only stream buffer over a string's bytes (no copy).
class StringBuffer : public std::streambuf {
 public:
  explicit StringBuffer(const std::string& s) {
    char* p = const_cast<char*>(s.data());  // never written: no put area
    setg(p, p, p + s.size());
  }
};

ShardingProblem ShardingProblem::parse(const std::string& json, const std::string& source) {
  ProblemReader r(number_budget());
  StringBuffer in(json);
  const bool ok = json_scan::Scanner<ProblemReader>(in, r).document();
  AS_CHECK(ok, "problem '", source, "': ", r.error().empty() ? "malformed" : r.error());
  return assemble(r, source);
}

ShardingProblem ShardingProblem::read(const std::string& path) {
  require_regular_file(path, "problem");
  InflatingBuffer buffer(path, kMaxProblemTextBytes);
  ProblemReader r(number_budget());
  const bool ok = json_scan::Scanner<ProblemReader>(buffer, r).document();
  AS_CHECK(!buffer.too_long(), "problem '", path, "' holds more than ",
           format_bytes(double(kMaxProblemTextBytes)),
           " of JSON (decompressed); is it the right file (or a gzip bomb)?");
  AS_CHECK(!buffer.damaged(), "problem '", path, "' is not readable (a damaged gzip file?)");
  AS_CHECK(ok, "problem '", path, "': ", r.error().empty() ? "malformed" : r.error());
  return assemble(r, path);
}

}  // namespace autoshard
