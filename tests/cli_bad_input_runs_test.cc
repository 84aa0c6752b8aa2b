// Bad input around a run's files (issue 29, round 2), in the style of
// cli_bad_input_test.cc: checkpoint retention touches only the run's own
// checkpoints, output flags never replace a user's file unless told to and
// leave no temporaries, and a FIFO given as data or weights is an error,
// not a hang. (Ranks that disagree under mpirun: tests/mpi/agreement_test.sh.)
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/models/gpt2/formats.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "cli_runner.h"
#include "test_util.h"

namespace autoshard {
namespace {

using cli_runner::count;
using cli_runner::Result;
using cli_runner::run;

namespace fs = std::filesystem;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class BadRunInput : public testing::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return path(name);
  }
  std::string fifo(const std::string& name) {
    EXPECT_EQ(::mkfifo(path(name).c_str(), 0644), 0);
    return path(name);
  }
  // The contract: exit 1 within seconds, one error line naming `needle`,
  // and no temporary left in the test directory.
  void expect_error(const std::string& args, const std::string& needle) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_EQ(count(r.output, "internal error"), 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "wanted '" << needle << "' in\n"
                                                        << r.output;
    EXPECT_LT(r.seconds, 20) << r.output;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      EXPECT_TRUE(name.find(".tmp") == std::string::npos || name.find("mine") != std::string::npos)
          << "leftover " << e.path();
    }
  }
};

const std::string kTrain = "train --model tiny --batch 2 --seq 8 --sample 0 ";
const std::string kTrainAny = "train --batch 2 --seq 8 --sample 0 --steps 1 ";

// A second run in a directory holding another run's checkpoints is refused
// (--resume continues it); retention then removes only that lineage's own
// complete checkpoints, never the user's directories that look like them.
TEST_F(BadRunInput, RetentionRemovesOnlyTheRunsOwnCheckpoints) {
  const std::string ck = path("ck");
  ASSERT_EQ(run(kTrain + "--steps 4 --seed 3 --checkpoint-dir " + ck).code, 0);
  ASSERT_TRUE(fs::exists(ck + "/step-00000004/state.json"));
  expect_error(kTrain + "--steps 1 --seed 9 --keep 1 --checkpoint-dir " + ck,
               "already holds checkpoints of an earlier run (up to step 4)");
  EXPECT_TRUE(fs::exists(ck + "/step-00000004/model.safetensors"));
  // The user's own directories, named like checkpoints but holding none.
  fs::create_directories(ck + "/step-00000002");
  std::ofstream(ck + "/step-00000002/notes.txt") << "mine";
  fs::create_directories(ck + "/.tmp-step-mine");
  std::ofstream(ck + "/.tmp-step-mine/notes.txt") << "mine";
  fs::create_directories(ck + "/step-00000003x");
  const Result r =
      run(kTrain + "--steps 7 --seed 3 --keep 1 --save-every 1 --resume --checkpoint-dir " + ck);
  ASSERT_EQ(r.code, 0) << r.output;
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(ck)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"step-00000007", "step-00000002", ".tmp-step-mine",
                                          "step-00000003x"}));
  EXPECT_EQ(read(ck + "/step-00000002/notes.txt"), "mine");
}

// Two managers (two runs) in one directory: each prunes only its own
// checkpoints, and neither replaces a step directory of the other's.
TEST_F(BadRunInput, ManagersOfTwoRunsLeaveEachOthersCheckpoints) {
  GPT2 model(GPT2Config::preset("test"), 6, 11);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const std::string ck = path("ck");
  CheckpointManager first({.directory = ck, .keep = 1, .background = false});
  first.save(model, 5, {});
  first.save(model, 6, {});
  CheckpointManager second({.directory = ck, .keep = 1, .background = false});
  EXPECT_NE(first.run_id(), second.run_id());
  second.save(model, 2, {});
  second.save(model, 3, {});
  EXPECT_EQ(second.steps(), (std::vector<int64_t>{3, 6}));
  EXPECT_THROW(second.save(model, 6, {}), Error);
  EXPECT_EQ(read_state(ck + "/step-00000006")["run"], first.run_id());
  // A resumed manager continues the run it loads, and prunes its steps.
  CheckpointManager third({.directory = ck, .keep = 1, .background = false});
  third.restore(model, 3);
  EXPECT_EQ(third.run_id(), second.run_id());
  third.save(model, 4, {});
  EXPECT_EQ(third.steps(), (std::vector<int64_t>{4, 6}));
}

// Every output flag follows one rule: an existing file is an error (checked
// before the work), --overwrite replaces it atomically; a directory is never
// an output file; no temporary is left.
TEST_F(BadRunInput, OutputFlagsNeverReplaceAnExistingFileUnlessTold) {
  const std::string mine = write("mine.json", "precious");
  const std::string plan = "plan --model test --mesh model=2 --batch 2 --seq 8 --plan-time 0.2 ";
  expect_error(plan + "--out " + mine, "--out '" + mine + "' already exists");
  expect_error(plan + "--export-problem " + mine, "--export-problem '" + mine + "' already exists");
  expect_error(kTrain + "--steps 3 --log " + mine, "--log '" + mine + "' already exists");
  expect_error("calibrate --quick --no-mpi --out " + mine, "give --overwrite to replace it");
  EXPECT_EQ(read(mine), "precious");
  fs::create_directories(path("outdir"));
  expect_error("calibrate --quick --no-mpi --out " + path("outdir"), "is a directory");
  expect_error(kTrain + "--steps 3 --log " + path("outdir"), "is a directory");
  expect_error(plan + "--out " + path("nowhere/plan.json"), "does not exist");
  expect_error(plan + "--export-problem " + fifo("problem.fifo") + " --overwrite",
               "not a regular file");
  // --overwrite replaces a file, and a new name needs nothing.
  Result r = run(plan + "--out " + mine + " --overwrite --export-problem " + path("p.json"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(read(mine))["mesh"]["model"], 2);
  EXPECT_TRUE(nlohmann::json::parse(read(path("p.json"))).contains("problem"));
  r = run(kTrain + "--steps 2 --overwrite --log " + mine);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(count(read(mine), "\"loss\""), 2);
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
}

// A FIFO where data or weights are expected would block the open forever.
TEST_F(BadRunInput, FifosAsDataOrWeightsAreErrors) {
  expect_error(kTrain + "--steps 1 --data " + fifo("text.fifo"), "is not a regular file");
  expect_error("eval --model tiny --batch 2 --seq 8 --data " + fifo("ids.bin"),
               "is not a regular file");
  expect_error(kTrainAny + "--model " + std::string(AUTOSHARD_TEST_DATA) +
                   "/hf_llama/config.json --data " + fifo("llama.txt"),
               "llama.txt' is not a regular file");
  expect_error(kTrain + "--steps 1 --weights " + fifo("w.safetensors"),
               "weight file '" + path("w.safetensors") + "' is not a regular file");
  expect_error(kTrain + "--steps 1 --weights " + fifo("gpt2.bin"), "gpt2.bin' is not a regular");
  // A shard of a Hugging Face directory.
  GPT2 model(GPT2Config::preset("test"), 16, 1);
  save_hf_gpt2(model, path("hf"));
  fs::remove(path("hf/model.safetensors"));
  fifo("hf/model.safetensors");
  expect_error(kTrainAny + "--weights " + path("hf"), "model.safetensors' is not a regular file");
}

}  // namespace
}  // namespace autoshard
