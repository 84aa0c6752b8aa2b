// The picture of a plan (pages/plan_html.h, `autoshard plan --html`): the
// page is well formed, has one element per device and per weight (a
// repeated block's weights once, with their count), draws uneven splits by
// array_split's sizes, and escapes every name.
#include "pages/plan_html.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli_runner.h"
#include "html_check.h"
#include "test_util.h"

namespace {

using autoshard::cli_runner::count;
using autoshard::cli_runner::run;
using nlohmann::json;

json weight(std::vector<int64_t> shape, json layout) {
  return {{"shape", shape}, {"layout", layout}, {"bytes_per_device", 160}};
}

// A report of mesh data=2,model=3 as plan_report writes it, with figures.
json report() {
  json r = {{"mesh", {{"data", 2}, {"model", 3}}},
            {"bytes_per_device",
             {{"weights", 1}, {"optimizer_state", 2}, {"activations", 3}, {"total", 6}}},
            {"collectives", json::array()}};
  r["parameters"] = {{"rows.kernel", weight({10, 4}, {"model", nullptr})},
                     {"h.0.mlp.kernel", weight({4, 8}, {nullptr, "model"})},
                     {"h.1.mlp.kernel", weight({4, 8}, {nullptr, "model"})},
                     {"<script>alert(1)</script>", weight({5}, {nullptr})}};
  r["reasons"] = {"predicted 1.0 ms per step on cpu",
                  "rows.kernel [model, -]; next best [-, -]: +0.020 ms, +0.0 MiB per device"};
  r["figures"] = {{"mesh_axes", json::array({json::array({"data", 2}), json::array({"model", 3})})},
                  {"weights", {"rows.kernel", "h.0.mlp.kernel", "h.1.mlp.kernel"}},
                  {"cluster", "cpu"},
                  {"step_s", 0.002},
                  {"compute_s", 0.0015},
                  {"communication_s", 0.0005},
                  {"by_op", {{"MatMul", 0.001}, {"all_reduce over model", 0.0005}}},
                  {"by_axis", {{"model", 0.0005}}},
                  {"memory",
                   {{"positions", 3},
                    {"planned_bytes", 100},
                    {"devices", {{{"device", 0}, {"at", {0, 1, 2}}, {"bytes", {10, 50, 20}}}}}}}};
  return r;
}

// The attribute `name`'s values of the elements that have `marker` too.
std::vector<std::string> attributes(const std::string& page, const std::string& name) {
  std::vector<std::string> out;
  const std::regex re(" " + name + "=\"([^\"]*)\"");
  for (std::sregex_iterator it(page.begin(), page.end(), re), end; it != end; ++it)
    out.push_back((*it)[1]);
  return out;
}

TEST(PlanHtml, PageIsWellFormedWithOneElementPerDeviceAndWeight) {
  const std::string page = autoshard::plan_html(report(), "plan <of> test");
  EXPECT_EQ(autoshard::testing::html_problem(page), "");
  EXPECT_EQ(count(page, "data-device=\""), 6);
  const std::vector<std::string> weights = attributes(page, "data-weight");
  // h.0 and h.1 share shape and layout: drawn once, counted twice.
  EXPECT_EQ(weights, (std::vector<std::string>{"rows.kernel", "h.*.mlp.kernel",
                                               "&lt;script&gt;alert(1)&lt;/script&gt;"}));
  EXPECT_EQ(attributes(page, "data-count"), (std::vector<std::string>{"1", "2", "1"}));
  EXPECT_NE(page.find("plan &lt;of&gt; test"), std::string::npos);
  EXPECT_EQ(page.find("<script"), std::string::npos);
  EXPECT_EQ(page.find("<of>"), std::string::npos);
  // The step by op kind and by axis, memory over the step, the alternative.
  EXPECT_NE(page.find("data-op=\"MatMul\""), std::string::npos);
  EXPECT_NE(page.find("data-axis=\"model\""), std::string::npos);
  EXPECT_NE(page.find("data-series=\"device 0\" data-points=\"3\""), std::string::npos);
  EXPECT_NE(page.find("data-alternative=\"rows.kernel\""), std::string::npos);
  // The notebook's fragment is one scoped <div>.
  const std::string fragment = autoshard::plan_html_fragment(report(), "t");
  EXPECT_EQ(autoshard::testing::html_problem(fragment), "");
  EXPECT_EQ(fragment.rfind("<div class=\"autoshard-plan\">", 0), 0u);
}

TEST(PlanHtml, UnevenSplitsAreDrawnByTheirSizes) {
  // rows.kernel: 10 rows over model=3 are array_split's 4, 3, 3 rows, each
  // block held by the two devices of its model coordinate.
  const std::string page = autoshard::plan_html(report(), "t");
  const size_t at = page.find("data-weight=\"rows.kernel\"");
  const std::string drawn = page.substr(at, page.find("data-weight=", at + 1) - at);
  EXPECT_EQ(attributes(drawn, "data-rows"), (std::vector<std::string>{"4", "3", "3"}));
  EXPECT_EQ(attributes(drawn, "data-devices"), (std::vector<std::string>{"0 3", "1 4", "2 5"}));
  const std::vector<std::string> heights = attributes(drawn, "data-height");
  ASSERT_EQ(heights.size(), 3u);
  EXPECT_NEAR(std::stod(heights[0]) / std::stod(heights[1]), 4.0 / 3.0, 0.01);
  EXPECT_EQ(heights[1], heights[2]);
}

TEST(PlanHtml, PatternsNameRepeatedBlocks) {
  EXPECT_EQ(autoshard::weight_pattern("h.11.mlp.c_fc.kernel").pattern, "h.*.mlp.c_fc.kernel");
  EXPECT_EQ(autoshard::weight_pattern("h.11.mlp.c_fc.kernel").layer, "h.*");
  EXPECT_EQ(autoshard::weight_pattern("wte.embeddings").pattern, "wte.embeddings");
  EXPECT_EQ(autoshard::weight_pattern("wte.embeddings").layer, "wte");
}

class PlanHtmlCli : public autoshard::testing::TempDirTest {};

TEST_F(PlanHtmlCli, PlanWritesThePictureOfEveryWeight) {
  const std::string page = (dir_ / "plan.html").string(), out = (dir_ / "plan.json").string();
  auto r = run("plan --model test --mesh data=2,model=3 --html " + page + " --out " + out);
  ASSERT_EQ(r.code, 0) << r.output;
  std::stringstream text;
  text << std::ifstream(page).rdbuf();
  const std::string html = text.str();
  EXPECT_EQ(autoshard::testing::html_problem(html), "");
  EXPECT_EQ(count(html, "data-device=\""), 6);
  // Every weight of the report is drawn, repeated blocks' once with a count.
  const json plan = json::parse(std::ifstream(out));
  int drawn = 0;
  for (const std::string& c : attributes(html, "data-count")) drawn += std::stoi(c);
  EXPECT_EQ(drawn, int(plan["parameters"].size()));
  EXPECT_LT(attributes(html, "data-weight").size(), plan["parameters"].size());
  EXPECT_NE(html.find("data-series=\"device 0\""), std::string::npos);
  // An existing page is not replaced without --overwrite; a pipe axis has none.
  r = run("plan --model test --mesh data=2,model=3 --html " + page);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
  EXPECT_NE(r.output.find("--html"), std::string::npos) << r.output;
  r = run("plan --model test --mesh pipe=2,model=2 --html " + (dir_ / "p.html").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--html"), std::string::npos) << r.output;
}

}  // namespace
