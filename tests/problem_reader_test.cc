// The IOPDDL reader's own JSON scanner (solver/json_scan.h) against nlohmann's
// parser, which it replaced for speed: on hand-picked corner cases and on
// thousands of random edits of a real problem's text, the scanner rejects as
// invalid JSON exactly what nlohmann rejects, and what it reads holds the
// numbers and names nlohmann reads. Also its own bounds: a huge string or
// number, and nesting no stack would hold.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "autoshard/error.h"
#include "autoshard/solver/problem.h"

namespace autoshard {
namespace {

const char* const kProblem =
    R"({"problem": {"name": "n\u00e9 \ud83d\ude00", "nodes": {"intervals": [[0, 3], [1, 2]],)"
    R"( "costs": [[1, 2e1, -0], [18]], "usages": [[5, 6, 7], [9]]}, "edges": {"nodes": [[0, 1]],)"
    R"( "costs": [[1, 2, 3.0]]}, "usage_limit": 30}})";

// What the reader says of a text: "ok", "syntax" (invalid JSON) or "other"
// (not a problem: the reader stops there, so JSON after it is not seen).
std::string verdict(const std::string& text) {
  try {
    ShardingProblem::parse(text, "t");
    return "ok";
  } catch (const Error& e) {
    return std::string(e.what()).find("invalid JSON") != std::string::npos ? "syntax" : "other";
  }
}

// The problem as nlohmann reads it (a document the reader accepted).
void expect_same_as_nlohmann(const std::string& text) {
  const ShardingProblem p = ShardingProblem::parse(text, "t");
  const nlohmann::json j = nlohmann::json::parse(text)["problem"];
  if (j.contains("name")) {
    EXPECT_EQ(p.name, j["name"].get<std::string>());
  }
  ASSERT_EQ(p.nodes.size(), j["nodes"]["costs"].size());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    EXPECT_EQ(double(p.nodes[i].lo), j["nodes"]["intervals"][i][0].get<double>());
    for (size_t k = 0; k < p.nodes[i].cost.size(); ++k) {
      EXPECT_EQ(double(p.nodes[i].cost[k]), j["nodes"]["costs"][i][k].get<double>()) << text;
      EXPECT_EQ(double(p.nodes[i].usage[k]), j["nodes"]["usages"][i][k].get<double>()) << text;
    }
  }
  for (size_t e = 0; e < p.edges.size(); ++e)
    for (size_t k = 0; k < p.edges[e].cost.size(); ++k)
      EXPECT_EQ(double(p.edges[e].cost[k]), j["edges"]["costs"][e][k].get<double>()) << text;
}

TEST(ProblemReader, ReadsWhatNlohmannReads) {
  EXPECT_EQ(verdict(kProblem), "ok");
  expect_same_as_nlohmann(kProblem);
  EXPECT_EQ(ShardingProblem::parse(kProblem, "t").name, "n\xc3\xa9 \xf0\x9f\x98\x80");
  // A byte order mark, spaces everywhere, integers at the edges of 64 bits.
  std::string edges = kProblem;
  edges.replace(edges.find("[[5, 6, 7]"), 10, "[[9223372036854775807, 0, 1]");
  edges.replace(edges.find("\"usage_limit\": 30"), 17, "\"usage_limit\": 1E30");
  EXPECT_EQ(verdict(edges), "other");  // 1e30 is not an int64 limit
  edges.replace(edges.find("1E30"), 4, " \t\r\n 30 ");
  EXPECT_EQ(verdict("\xEF\xBB\xBF" + edges), "ok");
  expect_same_as_nlohmann("\xEF\xBB\xBF" + edges);
}

// `value` as the value of a key the reader ignores: only its syntax counts.
std::string inside(const std::string& value) {
  std::string text = kProblem;
  text.insert(text.rfind('}'), ", \"x\": " + value);
  return text;
}

TEST(ProblemReader, RejectsAsInvalidJsonWhatNlohmannRejects) {
  const std::string cases[] = {"",
                               " ",
                               "{",
                               "}",
                               "[1,]",
                               "{\"a\":1,}",
                               "{\"a\" 1}",
                               "{1:2}",
                               "01",
                               "-",
                               "1.",
                               ".5",
                               "1e",
                               "1e+",
                               "+1",
                               "-01",
                               "0x10",
                               "tru",
                               "nul",
                               "[1 2]",
                               "\"abc",
                               "\"a\\x\"",
                               "\"\\u12g4\"",
                               "\"\\ud800\"",
                               "\"\\udc00\"",
                               "\"\\ud800\\u0041\"",
                               "\"\x01\"",
                               "\"\xc0\xaf\"",
                               "\"\xed\xa0\x80\"",
                               "\"\xf5\x80\x80\x80\"",
                               "\"\xe2\x82\"",
                               "1 2",
                               "{} x",
                               "\xEF\xBB",
                               "\xEF\xBB\xBF",
                               "[-0, 0e0, 1E+2, -1.5e-3]",
                               "18446744073709551616",
                               "-9223372036854775809",
                               "\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
                               "[[[]]]",
                               "{\"a\":{\"b\":[]}}",
                               "true",
                               "false",
                               "null",
                               "1e400"};
  for (const std::string& value : cases) {
    const std::string text = inside(value);
    EXPECT_EQ(verdict(text), nlohmann::json::accept(text) ? "ok" : "syntax") << "'" << value << "'";
  }
}

// Random edits (characters that make and break JSON inserted, deleted or
// replaced) of a problem's text, and of a value inside it that the reader
// ignores: the scanner and nlohmann agree on every one, and where the
// reader accepts, on every number.
std::string edited(std::string text, std::mt19937& rng) {
  const std::string alphabet = "{}[],:\"\\-+.eE0123456789 \nu\xc3\xa9tfnlx";
  for (int edits = 1 + int(rng() % 3); edits > 0; --edits) {
    const size_t at = rng() % (text.size() + 1);
    const char c = alphabet[rng() % alphabet.size()];
    switch (rng() % 3) {
      case 0:
        text.insert(at, 1, c);
        break;
      case 1:
        if (at < text.size()) text.erase(at, 1);
        break;
      default:
        if (at < text.size()) text[at] = c;
    }
  }
  return text;
}

TEST(ProblemReader, AgreesWithNlohmannOnRandomEdits) {
  std::mt19937 rng(3);
  int syntax = 0, accepted = 0;
  const std::string values[] = {"[1, -2.5e3, {\"a\": [true, false, null]}]", "\"\\u00e9\\n\""};
  for (int trial = 0; trial < 4000; ++trial) {
    // The whole text: the reader may stop at a structure error first.
    const std::string text = edited(kProblem, rng);
    const bool valid = nlohmann::json::accept(text);
    const std::string v = verdict(text);
    ASSERT_TRUE(valid ? v != "syntax" : v != "ok") << "'" << text << "'";
    if (v == "ok") {
      ++accepted;
      expect_same_as_nlohmann(text);
    }
    // An ignored value: nothing but its syntax is checked.
    const std::string ignored = inside(edited(values[trial % 2], rng));
    const bool ok = nlohmann::json::accept(ignored);
    const std::string w = verdict(ignored);
    if (w != "other") {
      ASSERT_EQ(w, ok ? "ok" : "syntax") << "'" << ignored << "'";
      syntax += w == "syntax";
    }
  }
  EXPECT_GT(syntax, 1000);
  EXPECT_GT(accepted, 100);
}

TEST(ProblemReader, AHugeTokenOrDeepNestingIsAnErrorNotACrash) {
  std::string text = kProblem;
  const std::string big(2 << 20, 'a');
  text.replace(text.find("n\\u00e9"), 7, big);
  try {
    ShardingProblem::parse(text, "t");
    ADD_FAILURE() << "a 2 MiB name was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("in one string or number"), std::string::npos) << e.what();
  }
  const std::string deep = inside(std::string(100000, '[') + std::string(100000, ']'));
  try {
    ShardingProblem::parse(deep, "t");
    ADD_FAILURE() << "nesting 100,000 deep was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace autoshard
