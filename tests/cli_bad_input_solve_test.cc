// Hostile input to the planner's readers, table-driven like
// cli_bad_input_test.cc: IOPDDL problems for `autoshard solve` (wrong
// shapes and types, sums past 2^63, files that are not files, bombs) and
// cluster files for `autoshard plan` (figures outside physical bounds, wrong
// JSON types), and meshes too large to plan. Each ends with exit code 1 and
// exactly one line "autoshard: error: ..." naming the input and the fix;
// never a hang, an "internal error", or exit 0 on nonsense.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "test_util.h"

namespace autoshard {
namespace {

using cli_runner::count;
using cli_runner::Result;
using cli_runner::run;

namespace fs = std::filesystem;

// The contest's example problem (tests/data/iopddl_example.json) with edits.
nlohmann::json example() {
  std::ifstream in(std::string(AUTOSHARD_TEST_DATA) + "/iopddl_example.json");
  return nlohmann::json::parse(in);
}

// A valid cluster file (an A100 node's figures), to break one field at a time.
nlohmann::json cluster() {
  return nlohmann::json::parse(R"({
    "name": "test-cluster",
    "device": {"flops": {"f32": 19.5e12, "bf16": 312e12},
               "gemm_efficiency": [[1e9, 0.45], [1e11, 0.8]],
               "memory_bytes": 85899345920, "memory_bandwidth": 2.0e12,
               "stream_efficiency": 0.8, "op_overhead_s": 5e-6},
    "links": [{"name": "nvlink", "devices_per_group": 8, "bandwidth": 300e9,
               "latency_s": 2e-6, "efficiency": 0.8},
              {"name": "ib", "devices_per_group": 0, "bandwidth": 25e9,
               "latency_s": 5e-6, "efficiency": 0.8}]})");
}

class BadPlannerInput : public testing::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return path(name);
  }
  std::string gzip(const std::string& name, const std::string& head, size_t repeat,
                   const std::string& unit, const std::string& tail) {
    gzFile f = gzopen(path(name).c_str(), "wb1");
    gzwrite(f, head.data(), static_cast<unsigned>(head.size()));
    std::string block;
    for (int i = 0; i < 4096; ++i) block += unit;
    for (size_t i = 0; i < repeat / 4096; ++i)
      gzwrite(f, block.data(), static_cast<unsigned>(block.size()));
    gzwrite(f, tail.data(), static_cast<unsigned>(tail.size()));
    gzclose(f);
    return path(name);
  }
  // The contract: exit 1, one error line naming `needle`, within seconds.
  void expect_error(const std::string& args, const std::string& needle,
                    const std::string& env = "") {
    SCOPED_TRACE(args);
    const Result r = run(args, env);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_EQ(count(r.output, "internal"), 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "wanted '" << needle << "' in\n"
                                                        << r.output;
    EXPECT_LT(r.seconds, 20) << r.output;
  }
  void expect_problem_error(const nlohmann::json& problem, const std::string& needle) {
    expect_error("solve " + write("p.json", problem.dump()) + " --time-limit 1", needle);
  }
  void expect_cluster_error(const nlohmann::json& c, const std::string& needle) {
    expect_error("plan --model test --mesh data=2,model=2 --cluster " + write("c.json", c.dump()),
                 needle);
  }
};

TEST_F(BadPlannerInput, MemorySumsPast2To63AreExact) {
  // Three nodes live at once whose smallest usages sum to 2^63 + 2^61:
  // provably infeasible, not "peak usage -9223372036854775808".
  nlohmann::json p = {
      {"problem",
       {{"name", "big"},
        {"nodes",
         {{"intervals", {{0, 5}, {1, 5}, {2, 5}}},
          {"costs", {{3}, {4}, {5}}},
          {"usages", {{int64_t{1} << 62}, {int64_t{1} << 62}, {int64_t{1} << 61}}}}},
        {"edges", {{"nodes", nlohmann::json::array()}, {"costs", nlohmann::json::array()}}},
        {"usage_limit", INT64_MAX}}}};
  expect_problem_error(p, "the smallest usages alone peak at 11529215046068469760");
  // Feasible only with the small usages: the cheap choice overflows 2^63.
  p["problem"]["nodes"] = {{"intervals", {{0, 5}, {0, 5}}},
                           {"costs", {{1, 100}, {1, 100}}},
                           {"usages", {{int64_t{1} << 62, 10}, {int64_t{1} << 62, 10}}}};
  p["problem"]["usage_limit"] = int64_t{1} << 62;
  const Result r = run("solve " + write("q.json", p.dump()) + " --time-limit 5 --rounds 3");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("\n[1,1]\n"), std::string::npos) << r.output;
}

TEST_F(BadPlannerInput, ProblemsOfTheWrongShape) {
  expect_error("solve " + write("a.json", "[1]"), "must be an object {\"problem\": {...}}");
  expect_error("solve " + write("b.json", "{\"nodes\": 1}"), "has no \"problem\" object");
  expect_error("solve " + write("c.json", "\"problem\""), "not a string");
  expect_error("solve " + write("d.json", "{\"problem\": [3]}"), "\"problem\" must be an object");
  nlohmann::json p = example();
  p["problem"]["usage_limit"] = "75";
  expect_problem_error(p, "\"usage_limit\" must be an integer, not a string");
  p = example();
  p["problem"]["nodes"]["costs"][3] = {85, "75"};
  expect_problem_error(p, "\"nodes.costs\"[3] must be an integer, not a string");
  p = example();
  p["problem"]["nodes"]["usages"][1] = 25;
  expect_problem_error(p, "\"nodes.usages\"[1] must be a list of integers");
  p = example();
  p["problem"]["edges"].erase("costs");
  expect_problem_error(p, "has no \"edges.costs\" list");
  p = example();
  p["problem"]["name"] = 17;
  expect_problem_error(p, "\"name\" must be a string");
  p = example();
  p["problem"]["nodes"] = {{"intervals", nlohmann::json::array()},
                           {"costs", nlohmann::json::array()},
                           {"usages", nlohmann::json::array()}};
  p["problem"]["edges"] = {{"nodes", nlohmann::json::array()}, {"costs", nlohmann::json::array()}};
  expect_problem_error(p, "has no nodes");
  p = example();
  p["problem"]["edges"]["costs"][1] = {50, -10, 40};
  expect_problem_error(p, "edge 1 has a negative cost (-10)");
}

TEST_F(BadPlannerInput, NoAnswerIsAnErrorWithNothingOnStdout) {
  // Two values live at once: each small usage alone is allowed, both
  // together forbidden by their edge, and any other pair overflows:
  // infeasible, though neither the smallest usages nor the floor of the
  // allowed choices proves it; no placeholder answer.
  nlohmann::json p = example();
  p["problem"]["nodes"] = {{"intervals", {{0, 9}, {0, 9}}},
                           {"costs", {{15, 15}, {15, 15}}},
                           {"usages", {{100, 1}, {100, 1}}}};
  p["problem"]["edges"] = {{"nodes", {{0, 1}}},
                           {"costs", {{0, 0, 0, int64_t{1000000000000000000}}}}};
  const std::string file = write("p.json", p.dump());
  expect_error("solve " + file + " --time-limit 0.3", "no feasible assignment found");
  const Result r = run("solve " + file + " --time-limit 0.3 2>/dev/null");
  EXPECT_EQ(r.output.find('['), std::string::npos) << r.output;
  // The small usage forbidden by its own cost: proven by the allowed
  // choices' floor, without a search.
  p["problem"]["nodes"] = {{"intervals", {{0, 9}}},
                           {"costs", {{int64_t{1000000000000000000}, 15}}},
                           {"usages", {{1, 90}}}};
  p["problem"]["edges"] = {{"nodes", nlohmann::json::array()}, {"costs", nlohmann::json::array()}};
  expect_error("solve " + write("p.json", p.dump()) + " --time-limit 0.3",
               "with the choices its edges allow, the least usages peak at 90");
}

// Another solver's answer checked against the problem: cost and peak
// worked out by hand on the contest's example (limit 50), and answers of
// the wrong length, a strategy that does not exist, or no array at the end
// are errors that say so.
TEST_F(BadPlannerInput, EvaluatesAnotherSolversAnswer) {
  const std::string problem = std::string(AUTOSHARD_TEST_DATA) + "/iopddl_example.json";
  // Nodes 15 + 55 + 35 + 75 + 95 = 275, edges 30 + 40 + 10 + 30 + 60 = 170;
  // nodes 0, 1 and 2 live in [50, 70): 10 + 25 + 15 = 50.
  Result r =
      run("solve " + problem + " --evaluate " + write("a.txt", "# cost 445\n[0, 0, 2, 1, 0]\n\n"));
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["cost"], 445);
  EXPECT_EQ(j["peak_usage"], 50);
  EXPECT_EQ(j["usage_limit"], 50);
  EXPECT_EQ(j["feasible"], true);
  // Nodes 15 + 65 + 45 + 85 + 95 = 305, edges 40 + 10 + 20 + 20 + 70 = 160;
  // 10 + 25 + 20 = 55 in [50, 70): over the limit.
  r = run("solve " + problem + " --evaluate " + write("b.txt", "[0,1,1,0,0]"));
  ASSERT_EQ(r.code, 0) << r.output;
  j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["cost"], 465);
  EXPECT_EQ(j["peak_usage"], 55);
  EXPECT_EQ(j["feasible"], false);
  expect_error("solve " + problem + " --evaluate " + write("c.txt", "[0,0,2,1]"),
               "has 4 strategies for the problem's 5 nodes");
  expect_error("solve " + problem + " --evaluate " + write("d.txt", "[0,0,3,1,0]"),
               "gives node 2 strategy 3; it has 3");
  expect_error("solve " + problem + " --evaluate " + write("e.txt", "[0,0,2,1,0]\ntimeout\n"),
               "must end with a JSON array of strategy indices");
  expect_error("solve " + problem + " --evaluate " + path("missing.txt"),
               "cannot read the answer file");
}

TEST_F(BadPlannerInput, ReadingCountsAgainstTheTimeLimit) {
  // 60000 nodes in a chain: with no time left after reading, the smallest
  // usages (which fit) are the answer, promptly.
  std::string text = "{\"problem\":{\"nodes\":{\"intervals\":[";
  const int n = 60000;
  for (int i = 0; i < n; ++i)
    text += (i ? ",[" : "[") + std::to_string(i) + "," + std::to_string(i + 2) + "]";
  text += "],\"costs\":[";
  for (int i = 0; i < n; ++i) text += i ? ",[5,3]" : "[5,3]";
  text += "],\"usages\":[";
  for (int i = 0; i < n; ++i) text += i ? ",[1,2]" : "[1,2]";
  text += "]},\"edges\":{\"nodes\":[],\"costs\":[]},\"usage_limit\":3}}";
  const Result r = run("solve " + write("chain.json", text) + " --time-limit 0.001");
  EXPECT_EQ(r.code, 0) << r.output.substr(0, 2000);
  EXPECT_LT(r.seconds, 20);
  const size_t at = r.output.rfind("\n[");
  ASSERT_NE(at, std::string::npos) << r.output.substr(0, 2000);
  EXPECT_EQ(nlohmann::json::parse(r.output.substr(at + 1)).size(), size_t{n});
}

TEST_F(BadPlannerInput, TheTimeLimitCountsFromTheStartOfTheProcess) {
  // A problem of several MB: what went to starting the program and reading
  // it is taken off the search, so the answer comes within the limit.
  std::string text = "{\"problem\":{\"nodes\":{\"intervals\":[";
  const int n = 40000;
  for (int i = 0; i < n; ++i)
    text += (i ? ",[" : "[") + std::to_string(i) + "," + std::to_string(i + 2) + "]";
  text += "],\"costs\":[";
  for (int i = 0; i < n; ++i) text += i ? ",[5,3,7,2]" : "[5,3,7,2]";
  text += "],\"usages\":[";
  for (int i = 0; i < n; ++i) text += i ? ",[1,2,1,3]" : "[1,2,1,3]";
  text += "]},\"edges\":{\"nodes\":[],\"costs\":[]},\"usage_limit\":5}}";
  ASSERT_GT(text.size(), size_t{1} << 20);
  const Result r = run("solve " + write("big.json", text) + " --time-limit 1");
  ASSERT_EQ(r.code, 0) << r.output.substr(0, 2000);
  const size_t at = r.output.find("search time ");
  ASSERT_NE(at, std::string::npos) << r.output.substr(0, 2000);
  double search = 0, limit = 0, before = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + at,
                        "search time %lf s of --time-limit %lf s (%lf s went to starting", &search,
                        &limit, &before),
            3);
  EXPECT_EQ(limit, 1);
  EXPECT_GT(before, 0);  // the program's start and the reading were counted
  // The search gets what is left of the limit; on a loaded machine (ASan,
  // other jobs) starting and reading may take it all, and then nothing.
  if (before < 1 - 0.04)
    EXPECT_NEAR(search + before, 1 - 0.04, 0.002);
  else
    EXPECT_EQ(search, 0);
  // Not a timing test (machines differ): only far past the limit is wrong.
  EXPECT_LT(r.seconds, 3);
}

TEST_F(BadPlannerInput, ProblemFilesThatAreNotFiles) {
  expect_error("solve /dev/zero", "is not a regular file");
  expect_error("solve " + dir_.string(), "is a directory");
  ASSERT_EQ(mkfifo(path("fifo").c_str(), 0600), 0);
  expect_error("solve " + path("fifo"), "is not a regular file");
  expect_error("plan --model test --mesh data=2 --cluster " + path("fifo"),
               "is not a regular file");
  expect_error("plan --model test --mesh data=2 --cluster /dev/zero", "is not a regular file");
}

TEST_F(BadPlannerInput, CompressedBombsAreBounded) {
  // 8 MB of zeros in one cost list (40 KB gzipped) against 64 MiB of memory.
  const std::string bomb =
      gzip("bomb.json.gz", "{\"problem\":{\"nodes\":{\"costs\":[[0", 4u << 20, ",0", "]]}}}");
  expect_error("solve " + bomb, "too large for this machine's memory",
               "AUTOSHARD_MEMORY_LIMIT=64M");
  // A damaged gzip stream.
  std::ifstream in(bomb, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  expect_error("solve " + write("cut.json.gz", bytes.substr(0, bytes.size() / 2)), "cut.json.gz");
}

TEST_F(BadPlannerInput, ClusterFiguresOutsidePhysicalBounds) {
  nlohmann::json c = cluster();
  c["device"]["stream_efficiency"] = 0.0;
  expect_cluster_error(c, "\"device.stream_efficiency\" is 0; it must be from 0.001 to 1");
  c = cluster();
  c["device"]["op_overhead_s"] = 1e200;
  expect_cluster_error(c, "\"device.op_overhead_s\" is 1e+200");
  c = cluster();
  c["device"]["flops"]["bf16"] = 1e-200;
  expect_cluster_error(c, "\"device.flops.bf16\" is 1e-200");
  c = cluster();
  c["links"][1]["efficiency"] = 1.5;
  expect_cluster_error(c, "\"links[1].efficiency\" is 1.5");
  c = cluster();
  c["shared_cores"] = 1e12;
  expect_cluster_error(c, "\"shared_cores\" is 1000000000000");
  c = cluster();
  c["shared_cores"] = 2.5;
  expect_cluster_error(c, "\"shared_cores\" is 2.5; it must be a whole number");
  c = cluster();
  c["device"]["memory_bandwidth"] = -2e12;
  expect_cluster_error(c, "\"device.memory_bandwidth\" is -2000000000000");
  c = cluster();
  c["device"]["gemm_efficiency"] = {{1e9, 0.45}, {1e9, 0.5}};
  expect_cluster_error(c, "two points at 1e+09 flops");
  c = cluster();
  c["device"]["stream_eficiency"] = 0.8;
  expect_cluster_error(c, "unknown field \"stream_eficiency\"");
}

TEST_F(BadPlannerInput, ClusterFieldsOfTheWrongType) {
  nlohmann::json c = cluster();
  c["name"] = 12;
  expect_cluster_error(c, "\"name\" must be a string, not number");
  c = cluster();
  c["links"][1]["name"] = {"ib"};
  expect_cluster_error(c, "\"links[1].name\" must be a string, not array");
  c = cluster();
  c["device"]["memory_bytes"] = "80GB";
  expect_cluster_error(c, "\"device.memory_bytes\" must be a number, not string");
  c = cluster();
  c["links"] = {{"name", "nvlink"}};
  expect_cluster_error(c, "\"links\" must list 1 to 16 levels");
  c = cluster();
  c["links"][0] = 8;
  expect_cluster_error(c, "\"links[0]\" must be an object");
  c = cluster();
  c["device"]["flops"] = 19.5e12;
  expect_cluster_error(c, "\"flops\" must be an object");
}

// Planning lowers only the devices it prices (device 0 for a prediction), so
// a mesh of 2^24 devices needs no per-device memory: it plans under a 2 GiB
// address-space cap in seconds (it allocated 7 GB and died before).
TEST_F(BadPlannerInput, MeshesOfMillionsOfDevicesPlanInBoundedMemory) {
#ifdef AUTOSHARD_SANITIZED
  const std::string cap = "";  // sanitizers reserve terabytes of address space
#else
  const std::string cap = "ulimit -v 2097152;";
#endif
  const Result r =
      run("plan --model test --mesh data=4096,model=4096 --cluster a100-80g --predict", cap);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("peak memory"), std::string::npos) << r.output;
  EXPECT_LT(r.seconds, 20);
}

}  // namespace
}  // namespace autoshard
