// `autoshard report`: training curves of train --log files on one page: one
// point per logged step per run, one series per run, and one error line
// naming the file and line for bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "cli_runner.h"
#include "html_check.h"
#include "test_util.h"

namespace {

using autoshard::cli_runner::count;
using autoshard::cli_runner::run;

class Report : public autoshard::testing::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return (dir_ / name).string();
  }
  std::string read(const std::string& name) {
    std::stringstream s;
    s << std::ifstream(dir_ / name).rdbuf();
    return s.str();
  }
  // A log of `steps` steps as train --log writes them.
  std::string log(const std::string& name, int steps) {
    std::string text;
    for (int s = 1; s <= steps; ++s)
      text += "{\"step\":" + std::to_string(s) + ",\"loss\":" + std::to_string(5.0 / s) +
              ",\"lr\":0.001,\"step_ms\":40,\"tokens_per_second\":" + std::to_string(900 + s) +
              "}\n";
    return write(name, text);
  }
};

// data-points of the series named `name`, or -1.
int points(const std::string& page, const std::string& name) {
  const std::regex re("data-series=\"" + name + "\" data-points=\"(\\d+)\"");
  std::smatch m;
  return std::regex_search(page, m, re) ? std::stoi(m[1]) : -1;
}

TEST_F(Report, OnePointPerLoggedStepAndOneSeriesPerRun) {
  const std::string a = log("a.jsonl", 5), b = log("b.jsonl", 3);
  const auto r = run("report " + a + " " + b + " --html " + (dir_ / "r.html").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string page = read("r.html");
  EXPECT_EQ(autoshard::testing::html_problem(page), "");
  EXPECT_EQ(points(page, "a loss"), 5);
  EXPECT_EQ(points(page, "b loss"), 3);
  EXPECT_EQ(points(page, "a"), 5);  // lr, throughput, step time: one series per run
  EXPECT_EQ(count(page, "data-series=\"a\""), 3);
  EXPECT_EQ(count(page, "data-series=\"b\""), 3);
  EXPECT_EQ(count(page, "data-run=\""), 2);
}

TEST_F(Report, ValidationLossAndRepeatedStepsOfAResumedRun) {
  // Steps 2-3 logged again after a resume from step 1: the later lines count.
  const std::string k = write("k.jsonl",
                              "{\"step\":1,\"loss\":1.0,\"examples_per_second\":10}\n"
                              "{\"step\":2,\"loss\":0.9}\n{\"step\":3,\"loss\":0.8}\n\n"
                              "{\"step\":2,\"loss\":0.95}\n"
                              "{\"step\":3,\"loss\":0.85,\"val_loss\":0.9}\n");
  const auto r = run("report " + k + " --html " + (dir_ / "k.html").string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string page = read("k.html");
  EXPECT_EQ(points(page, "k loss"), 3);
  EXPECT_EQ(points(page, "k val_loss"), 1);
  EXPECT_EQ(points(page, "k"), 1);  // examples_per_second
}

TEST_F(Report, BadInputIsOneLineNamingTheFileAndLine) {
  const std::string out = (dir_ / "out.html").string();
  const std::string not_json = write("bad.jsonl", "{\"step\":1,\"loss\":2}\nnot json\n");
  const std::string no_step = write("nostep.jsonl", "{\"loss\":2}\n");
  const std::string text_loss = write("text.jsonl", "{\"step\":1,\"loss\":\"low\"}\n");
  const std::string empty = write("empty.jsonl", "\n");
  struct Case {
    std::string args, says;
  } cases[] = {
      {(dir_ / "missing.jsonl").string() + " --html " + out, "missing.jsonl' cannot be read"},
      {not_json + " --html " + out, "bad.jsonl' line 2 is not valid JSON"},
      {no_step + " --html " + out, "nostep.jsonl' line 1 has no numeric \"step\""},
      {text_loss + " --html " + out, "text.jsonl' line 1: \"loss\" is \"low\", not a number"},
      {empty + " --html " + out, "empty.jsonl' holds no step"},
      {log("ok.jsonl", 2), "give --html FILE.html"},
      {dir_.string() + " --html " + out, "is a directory"},
  };
  for (const Case& c : cases) {
    const auto r = run("report " + c.args);
    EXPECT_EQ(r.code, 1) << c.args << "\n" << r.output;
    EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
    EXPECT_EQ(r.output.rfind("autoshard: error: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(out));
}

TEST_F(Report, PngWithoutChromiumSaysHowToInstallIt) {
  // A PATH of coreutils' timeout alone (the runner's).
  const std::string a = log("a.jsonl", 2);
  std::filesystem::create_directories(dir_ / "bin");
  std::filesystem::create_symlink("/usr/bin/timeout", dir_ / "bin" / "timeout");
  const auto r = run("report " + a + " --png " + (dir_ / "a.png").string(),
                     "env PATH=" + (dir_ / "bin").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(count(r.output, "\n"), 1) << r.output;
  EXPECT_NE(r.output.find("apt-get install chromium"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "a.png"));
}

}  // namespace
