// The `autoshard` command end to end: a short training run with a JSON log,
// eval, and a one-line error with a non-zero exit for each kind of bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>

#include "autoshard/io/safetensors.h"
#include "autoshard/io/token_data.h"
#include "cli_runner.h"
#include "test_util.h"

namespace {

using autoshard::cli_runner::Result;
using autoshard::cli_runner::run;

namespace fs = std::filesystem;

class Cli : public autoshard::testing::TempDirTest {
 protected:
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return (dir_ / name).string();
  }
  // `train ARGS` saved after 2 steps with `saved_on`, resumed to 4 with
  // `resumed_on`: its steps 3 and 4 must be one device's (`one`, 4 steps).
  void expect_resumed_as_one_device(const std::string& args, const std::string& saved_on,
                                    const std::string& resumed_on, const std::vector<double>& one);
};

TEST_F(Cli, TrainWritesOneJsonLinePerStepAndLossFalls) {
  std::string log = (dir_ / "log.jsonl").string();
  Result r =
      run("train --model tiny --batch 4 --seq 32 --steps 8 --lr 3e-3 --sample 20 --log " + log);
  ASSERT_EQ(r.code, 0) << r.output;
  std::ifstream in(log);
  std::string line;
  std::vector<double> losses;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    EXPECT_EQ(j["step"].get<int>(), static_cast<int>(losses.size()) + 1);
    EXPECT_GT(j["tokens_per_second"].get<double>(), 0);
    losses.push_back(j["loss"].get<double>());
  }
  ASSERT_EQ(losses.size(), 8u);
  EXPECT_NEAR(losses.front(), std::log(256.0), 0.3);  // a fresh model is near uniform
  EXPECT_LT(losses.back(), losses.front() - 0.5);
  EXPECT_NE(r.output.find("sample: The "), std::string::npos);
}

// The first thing a new user runs: `autoshard train` with no arguments learns
// the built-in story well enough that its sample is mostly the story's own
// words, not letter soup. (Skipped under sanitizers: seconds become minutes.)
TEST_F(Cli, DefaultTrainingEndsWithARecognisableSample) {
#ifdef AUTOSHARD_SANITIZED
  GTEST_SKIP() << "the full default run is too slow under sanitizers";
#endif
  Result r = run("train");
  ASSERT_EQ(r.code, 0) << r.output;
  const size_t at = r.output.find("sample: ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const std::string sample = r.output.substr(at + 8, 200);
  const std::string& corpus = autoshard::builtin_corpus();
  int words = 0, known = 0;
  std::string word;
  for (char c : sample + " ") {
    if (std::isalpha(static_cast<unsigned char>(c))) {
      word += c;
      continue;
    }
    if (word.size() >= 3) {
      ++words;
      known += corpus.find(word) != std::string::npos;
    }
    word.clear();
  }
  // The sample is drawn at the default temperature, so one unlikely
  // character can derail a word or two; a run whose training differs in the
  // last bits (sums in another order) draws other characters: 25 of 32 words
  // were the corpus's in one such run. An untrained model's are almost none.
  EXPECT_GE(words, 15) << sample;
  EXPECT_GE(known, words * 7 / 10) << sample;
}

TEST_F(Cli, EvalJson) {
  Result r = run("eval --model tiny --batch 2 --seq 16 --batches 3 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["batches"].get<int>(), 3);
  EXPECT_EQ(j["tokens"].get<int>(), 96);
  EXPECT_NEAR(j["loss"].get<double>(), std::log(256.0), 0.3);
}

TEST_F(Cli, ReadsNanoGptBinTokens) {
  std::string bin;
  for (int i = 0; i < 400; ++i) bin += static_cast<char>(i % 50), bin += '\0';
  Result r =
      run("eval --model tiny --batch 2 --seq 16 --batches 2 --json --data " + write("t.bin", bin));
  EXPECT_EQ(r.code, 0) << r.output;
}

std::vector<double> logged_losses(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::vector<double> losses;
  while (std::getline(in, line))
    losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  return losses;
}

// The losses a run logged in `path` are `want`'s from step `first` + 1 on
// (one device's, to 1e-5 relative), `count` of them.
void expect_losses(const std::string& path, const std::vector<double>& want, size_t count,
                   size_t first = 0) {
  const std::vector<double> got = logged_losses(path);
  ASSERT_EQ(got.size(), count) << path;
  ASSERT_LE(first + count, want.size()) << path;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[first + i], 1e-5 * want[first + i])
        << path << " step " << first + i + 1;
}

void Cli::expect_resumed_as_one_device(const std::string& args, const std::string& saved_on,
                                       const std::string& resumed_on,
                                       const std::vector<double>& one) {
  static int runs = 0;
  const std::string ckpt = (dir_ / ("ckpt" + std::to_string(++runs))).string(),
                    log = (dir_ / ("resumed" + std::to_string(runs) + ".jsonl")).string();
  Result r = run(args + "--steps 2 " + saved_on + " --checkpoint-dir " + ckpt);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run(args + "--steps 4 " + resumed_on + " --resume --checkpoint-dir " + ckpt + " --log " +
          log);
  ASSERT_EQ(r.code, 0) << r.output;
  expect_losses(log, one, 2, 2);
}

// --hosts H prices the devices as MPI ranks over H machines: collectives
// over the cluster's calibrated MPI link (here 5000 times slower than its
// in-process link), as under mpirun; AutoShard plans on that link too.
TEST_F(Cli, HostsPriceTheDevicesAsMpiRanks) {
  const std::string cluster = write("cluster.json", R"({"name": "c",
    "device": {"flops": {"f32": 50e9}, "gemm_efficiency": [[1e9, 0.8]],
               "memory_bytes": 8589934592, "memory_bandwidth": 2e10}, "shared_cores": 2,
    "links": [{"name": "shm", "devices_per_group": 0, "bandwidth": 5e9, "latency_s": 1e-6}],
    "mpi_link": {"name": "mpi", "devices_per_group": 0, "bandwidth": 1e6, "latency_s": 1e-3}})");
  const std::string args =
      "plan --model tiny --batch 6 --seq 16 --mesh data=2 --predict --json "
      "--cluster " +
      cluster;
  auto all_reduce_s = [&](const std::string& more) {
    const Result r = run(args + more);
    EXPECT_EQ(r.code, 0) << r.output;
    const nlohmann::json j = nlohmann::json::parse(r.output);
    return j["predicted"]["collectives_s"].value("all_reduce over data", 0.0);
  };
  const double in_process = all_reduce_s(" --plan data"),
               ranks = all_reduce_s(" --plan data --hosts 2");
  EXPECT_GT(in_process, 0);
  EXPECT_GT(ranks, 1000 * in_process);
  // AutoShard, pricing the slow link, communicates less than data parallelism.
  const double planned = all_reduce_s(" --plan auto --hosts 2 --deterministic");
  EXPECT_LT(planned, ranks);
}

TEST_F(Cli, TrainOnAMeshGivesTheOneDeviceLosses) {
  const std::string args = "train --model tiny --batch 4 --seq 16 --steps 4 --sample 0 --log ";
  std::string one = (dir_ / "one.jsonl").string(), mesh = (dir_ / "mesh.jsonl").string();
  ASSERT_EQ(run(args + one).code, 0);
  Result r = run(args + mesh + " --mesh data=2,model=3 --zero1");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("mesh data=2,model=3"), std::string::npos);
  std::vector<double> a = logged_losses(one), b = logged_losses(mesh);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << "step " << i + 1;
}

// A pipe mesh trains in stages (4 blocks over 3, 4 micro-batches of 6
// sequences; and 2 stages of model=2 each) with one device's losses, and its
// checkpoints are ordinary ones: a run saved on pipe=2 resumes on model=2
// where one device would be, and a data=2 run's on pipe=2,model=2.
// AutoShard inside the stages plans the whole model, which the stages hold
// between them: a memory per device that model=2 alone cannot fit trains in
// two stages of model=2.
TEST_F(Cli, AutoShardInsideStagesPlansInTheStagesMemoryTogether) {
  const std::string args = " --model tiny --steps 1 --batch 4 --seq 16 --memory-per-device 700000";
  const Result alone = run("train --mesh model=2" + args);
  EXPECT_NE(alone.code, 0);
  EXPECT_NE(alone.output.find("AutoShard: no plan"), std::string::npos) << alone.output;
  const Result staged = run("train --mesh pipe=2,model=2" + args);
  EXPECT_EQ(staged.code, 0) << staged.output;
}

// mini on pipe=2,model=2 with 8 micro-batches of one sequence fits 5 MB per
// device only as stages holding their own share (the whole step on model=2
// needs 19 MB; PipelineCost's AutoShardInsideTheStagesPlansUnderTheStages-
// OwnMemory prices this pipeline): it plans and trains there with one
// device's losses. (Training's AutoShard plans the whole model on one
// micro-batch under the stages' memory together.)
TEST_F(Cli, APipelineThatFitsOnlyAsStagesTrainsAsOneDevice) {
  const std::string args = "train --model mini --batch 8 --seq 64 --steps 2 --sample 0 ";
  const std::string one = (dir_ / "one.jsonl").string(), piped = (dir_ / "piped.jsonl").string();
  ASSERT_EQ(run(args + "--log " + one).code, 0);
  const Result r = run(
      args + "--mesh pipe=2,model=2 --microbatches 8 --memory-per-device 5000000 --log " + piped);
  ASSERT_EQ(r.code, 0) << r.output;
  expect_losses(piped, logged_losses(one), 2);
  const Result alone = run(args + "--mesh model=2 --memory-per-device 5000000");
  EXPECT_NE(alone.code, 0) << alone.output;
}

TEST_F(Cli, TrainsAPipelineAndResumesItOnAnotherMesh) {
  // A constant learning rate: --steps 2 and --steps 4 take the same steps.
  const std::string args =
      "train --model mini --batch 6 --seq 16 --sample 0 --lr-schedule constant ";
  const std::string one = (dir_ / "one.jsonl").string(), piped = (dir_ / "piped.jsonl").string();
  ASSERT_EQ(run(args + "--steps 4 --log " + one).code, 0);
  Result r =
      run(args + "--steps 4 --mesh pipe=3 --microbatches 4 --pipe-schedule gpipe --log " + piped);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("mesh pipe=3 (gpipe, 4 micro-batches)"), std::string::npos) << r.output;
  const std::string inside = (dir_ / "inside.jsonl").string();
  r = run(args + "--steps 4 --mesh pipe=2,model=2 --microbatches 3 --log " + inside);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> a = logged_losses(one);
  ASSERT_EQ(a.size(), 4u);
  expect_losses(piped, a, 4);
  expect_losses(inside, a, 4);
  // --microbatch-size 1 on data=2: 6 sequences are 3 micro-batches of 2.
  const std::string sized = (dir_ / "sized.jsonl").string();
  r = run(args + "--steps 4 --mesh data=2,pipe=2 --microbatch-size 1 --log " + sized);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("(1f1b, 3 micro-batches)"), std::string::npos) << r.output;
  expect_losses(sized, a, 4);
  expect_resumed_as_one_device(args, "--mesh pipe=2", "--mesh model=2", a);
  // And the other way: a data=2 run's checkpoint resumed on pipe=2,model=2.
  expect_resumed_as_one_device(args, "--mesh data=2 --plan data", "--mesh pipe=2,model=2", a);
}

// train --devices N prices pipelines as plan --devices N --predict does:
// on a cluster whose link makes a data or model axis slower than two
// stages (each recomputing its forward pass), `mini` on 2 devices trains
// pipe=2 with one device's losses; on this machine's own cluster it keeps
// the mesh without a pipe axis.
TEST_F(Cli, TrainDevicesChoosesAPipelineWhereOneIsPredictedFaster) {
  const std::string cluster = write("slow.json", R"({"name": "slow",
      "device": {"flops": {"f32": 50e9}, "gemm_efficiency": [[1e9, 0.8]],
                 "memory_bytes": 8589934592, "memory_bandwidth": 2e10}, "shared_cores": 0,
      "links": [{"name": "slow", "devices_per_group": 0, "bandwidth": 1e8, "latency_s": 1e-5}]})");
  const std::string args = "train --model mini --batch 8 --seq 32 --sample 0 --steps 3 ";
  const std::string one = (dir_ / "one.jsonl").string(), piped = (dir_ / "piped.jsonl").string();
  ASSERT_EQ(run(args + "--log " + one).code, 0);
  Result r = run(args + "--devices 2 --cluster " + cluster + " --log " + piped);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("--devices 2: a pipeline, predicted"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("mesh data=1,pipe=2,model=1 (1f1b, 8 micro-batches)"), std::string::npos)
      << r.output;
  expect_losses(piped, logged_losses(one), 3);
  r = run(args + "--devices 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("pipe="), std::string::npos) << r.output;
}

// --plan fsdp: every weight split over the data axis (uneven on data=3; and
// beside Megatron's model axis) trains with one device's losses; `plan` shows
// gathers and reduce-scatters, no gradient all-reduce; its checkpoint is an
// ordinary one, resumed on model=2 where one device would be.
TEST_F(Cli, FsdpTrainsAsOneDeviceAndItsCheckpointsResumeElsewhere) {
  const std::string args =
      "train --model mini --batch 6 --seq 16 --sample 0 --lr-schedule constant ";
  const std::string one = (dir_ / "one.jsonl").string(), three = (dir_ / "three.jsonl").string();
  ASSERT_EQ(run(args + "--steps 4 --log " + one).code, 0);
  Result r = run(args + "--steps 4 --mesh data=3 --plan fsdp --log " + three);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> a = logged_losses(one);
  ASSERT_EQ(a.size(), 4u);
  expect_losses(three, a, 4);
  expect_resumed_as_one_device(args, "--mesh data=2,model=2 --plan fsdp", "--mesh model=2", a);
  r = run("plan --model mini --batch 6 --seq 16 --mesh data=3 --plan fsdp");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("reduce_scatter"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("all_gather"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("wte.embeddings                           [256, 128]       [data, -]"),
            std::string::npos)
      << r.output;
}

// A Hugging Face Llama directory (2 kv heads, sharded BF16 files): training
// from it on model=3 under AutoShard and under Megatron's layout logs the
// one-device losses, and eval reads the same directory.
TEST_F(Cli, TrainsALlamaDirectoryOnAMesh) {
  const std::string args = "train --weights " + std::string(AUTOSHARD_TEST_DATA) +
                           "/hf_llama --batch 4 --seq 12 --steps 3 --sample 0 --log ";
  const std::string one = (dir_ / "one.jsonl").string();
  Result r = run(args + one);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> a = logged_losses(one);
  ASSERT_EQ(a.size(), 3u);
  for (const char* plan : {"auto", "megatron"}) {
    const std::string mesh = (dir_ / (std::string(plan) + ".jsonl")).string();
    r = run(args + mesh + " --mesh model=3 --strict --plan " + plan);
    ASSERT_EQ(r.code, 0) << r.output;
    const std::vector<double> b = logged_losses(mesh);
    ASSERT_EQ(b.size(), 3u);
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << plan << ", step " << i + 1;
  }
  r = run("eval --weights " + std::string(AUTOSHARD_TEST_DATA) +
          "/hf_llama --batch 2 --seq 12 --batches 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NEAR(nlohmann::json::parse(r.output)["loss"].get<double>(), a[0], 1.0);
}

// Greedy generation from a Llama directory on a mesh gives PyTorch's
// continuation; text prompts work for byte-level models; bad requests are
// one-line errors.
TEST_F(Cli, GeneratesFromALlamaDirectory) {
  const std::string data = AUTOSHARD_TEST_DATA;
  autoshard::SafetensorsFile ref(data + "/llama_reference.safetensors");
  const autoshard::Tensor prompt = ref.load("generate.prompt"),
                          greedy = ref.load("generate.greedy");
  std::string ids;
  for (int64_t i = 0; i < prompt.numel(); ++i)
    ids += (i ? "," : "") + std::to_string(prompt.i32()[i]);
  const std::string args = " " + data + "/hf_llama --prompt-ids " + ids + " --max-new-tokens " +
                           std::to_string(greedy.numel()) + " --temperature 0 --json --strict";
  // --model DIR reads the directory's weights as --weights DIR does (random
  // weights would give other ids).
  for (const char* mesh : {"", " --mesh model=3", " --mesh model=2 --plan megatron"})
    for (const char* flag : {"generate --weights", "generate --model"}) {
      Result r = run(flag + args + mesh);
      ASSERT_EQ(r.code, 0) << r.output;
      const auto j = nlohmann::json::parse(r.output);
      EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(),
                std::vector<int32_t>(greedy.i32(), greedy.i32() + greedy.numel()))
          << flag << mesh;
      EXPECT_GT(j["decode_tokens_per_s"].get<double>(), 0);
    }
  // The config's eos_token_id (here a list) ends the text unless --ignore-eos.
  std::filesystem::copy(data + "/hf_llama", dir_ / "eos");
  auto config = nlohmann::json::parse(std::ifstream(dir_ / "eos" / "config.json"));
  config["eos_token_id"] = {greedy.i32()[3], 100000};
  std::ofstream(dir_ / "eos" / "config.json") << config.dump();
  const std::string eos_args = "generate --weights " + (dir_ / "eos").string() + " --prompt-ids " +
                               ids + " --max-new-tokens 12 --temperature 0 --json";
  for (const char* ignore : {"", " --ignore-eos"}) {
    Result r = run(eos_args + ignore);
    ASSERT_EQ(r.code, 0) << r.output;
    const size_t expected = *ignore ? 12 : 4;
    EXPECT_EQ(nlohmann::json::parse(r.output)["output_ids"].size(), expected) << ignore;
  }
  Result r = run("generate --model tiny --prompt 'The ' --max-new-tokens 5 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["output_ids"].size(), 5u);
  EXPECT_EQ(j["text"].get<std::string>().substr(0, 4), "The ");
  r = run("generate --weights " + data + "/hf_llama --prompt hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--prompt-ids"), std::string::npos) << r.output;
  r = run("generate --weights " + data + "/hf_llama --prompt-ids 1,2 --max-new-tokens 100");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("max_position_embeddings"), std::string::npos) << r.output;
  r = run("generate --weights " + data + "/hf_llama --prompt-ids 1,500");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--prompt-ids"), std::string::npos) << r.output;
}

// A model directory with a tokenizer (here a word-level one over "t0" ...
// "t130", the fixture's 131 ids): --prompt TEXT gives the same tokens as
// --prompt-ids, text streams, `tokenize` prints ids, and text data trains
// exactly as the same ids in a .bin file.
TEST_F(Cli, ModelDirectoryTokenizerReadsAndWritesText) {
  const std::string data = AUTOSHARD_TEST_DATA;
  const fs::path dir = dir_ / "with_tokenizer";
  fs::copy(data + "/hf_llama", dir);
  nlohmann::json vocab;
  for (int i = 0; i < 131; ++i) vocab["t" + std::to_string(i)] = i;
  const nlohmann::json tokenizer{
      {"model", {{"type", "WordLevel"}, {"vocab", vocab}, {"unk_token", "t0"}}},
      {"pre_tokenizer", {{"type", "WhitespaceSplit"}}},
      {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", false}}}};
  std::ofstream(dir / "tokenizer.json") << tokenizer.dump();
  const auto words = [](const std::vector<int32_t>& ids) {
    std::string s;
    for (int32_t id : ids) s += (s.empty() ? "t" : " t") + std::to_string(id);
    return s;
  };

  autoshard::SafetensorsFile ref(data + "/llama_reference.safetensors");
  const autoshard::Tensor p = ref.load("generate.prompt"), g = ref.load("generate.greedy");
  const std::vector<int32_t> prompt(p.i32(), p.i32() + p.numel()),
      greedy(g.i32(), g.i32() + g.numel());
  const std::string args = "generate --weights " + dir.string() + " --prompt '" + words(prompt) +
                           "' --max-new-tokens " + std::to_string(greedy.size()) +
                           " --temperature 0 --mesh model=2";
  Result r = run(args + " --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["prompt_ids"].get<std::vector<int32_t>>(), prompt);
  EXPECT_EQ(j["output_ids"].get<std::vector<int32_t>>(), greedy);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), greedy.begin(), greedy.end());
  EXPECT_EQ(j["text"].get<std::string>(), words(all));
  r = run(args);  // streamed: the prompt, then each token's text as it comes
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, r.output.find('\n')), words(all)) << r.output;

  r = run("tokenize --weights " + dir.string() + " --text 't5 t130 t7'");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output, "5,130,7\n");
  r = run("tokenize --weights " + dir.string() + " --decode 5,130,7 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["text"], "t5 t130 t7");

  std::vector<int32_t> ids;
  std::string bin;
  for (int i = 0; i < 300; ++i) {
    ids.push_back((i * 37) % 131);
    bin += static_cast<char>(ids.back()), bin += '\0';
  }
  const std::string train =
      "train --weights " + dir.string() + " --batch 2 --seq 8 --steps 2 --sample 0 --log ";
  const std::string a = (dir_ / "text.jsonl").string(), b = (dir_ / "bin.jsonl").string();
  r = run(train + a + " --data " + write("words.txt", words(ids)));
  ASSERT_EQ(r.code, 0) << r.output;
  r = run(train + b + " --data " + write("ids.bin", bin));
  ASSERT_EQ(r.code, 0) << r.output;
  const std::vector<double> la = logged_losses(a), lb = logged_losses(b);
  ASSERT_EQ(la.size(), 2u);
  EXPECT_EQ(la, lb);
}

// convert writes a Llama directory as BF16 shards with an index (and OPT as
// F16): eval reads the same loss from them; GPT-2 refuses the options.
TEST_F(Cli, ConvertsDecoderDirectoriesToBf16Shards) {
  const std::string data = AUTOSHARD_TEST_DATA;
  for (const char* name : {"hf_llama", "hf_opt"}) {
    const std::string out = (dir_ / name).string(), in = data + "/" + name;
    Result r = run("convert " + in + " " + out + " --dtype " +
                   (std::string(name) == "hf_opt" ? "F16" : "bf16 --max-shard-size 4KB"));
    ASSERT_EQ(r.code, 0) << r.output;
    const std::string eval = " --batch 2 --seq 12 --batches 1 --json";
    // OPT's vocabulary (113) is below the bytes of the built-in corpus: ids.
    std::string ids;
    for (int i = 0; i < 200; ++i) ids += static_cast<char>(i % 100), ids += '\0';
    const std::string data_flag = " --data " + write(std::string(name) + ".bin", ids);
    Result a = run("eval --weights " + in + eval + data_flag);
    Result b = run("eval --weights " + out + eval + data_flag);
    ASSERT_EQ(a.code, 0) << a.output;
    ASSERT_EQ(b.code, 0) << b.output;
    EXPECT_EQ(nlohmann::json::parse(a.output)["loss"], nlohmann::json::parse(b.output)["loss"])
        << name;
  }
  EXPECT_TRUE(fs::exists(dir_ / "hf_llama" / "model.safetensors.index.json"));
  EXPECT_TRUE(fs::exists(dir_ / "hf_opt" / "model.safetensors"));
  Result r = run("convert " + data + "/hf_gpt2 " + (dir_ / "g").string() + " --dtype bf16");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("no --dtype"), std::string::npos) << r.output;
}

TEST_F(Cli, PlanJson) {
  Result r =
      run("plan --model test --mesh data=2,model=3 --batch 4 --seq 8 --json --plan megatron");
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["mesh"]["data"].get<int>(), 2);
  EXPECT_EQ(j["mesh"]["model"].get<int>(), 3);
  auto layout = [&](const char* p) { return j["parameters"][p]["layout"].dump(); };
  EXPECT_EQ(layout("wte.embeddings"), R"(["model",null])");
  EXPECT_EQ(layout("h.0.attn.query.kernel"), R"([null,"model",null])");
  EXPECT_EQ(layout("h.1.mlp.c_fc.kernel"), R"([null,"model"])");
  EXPECT_EQ(layout("h.1.mlp.c_proj.kernel"), R"(["model",null])");
  EXPECT_EQ(layout("h.1.mlp.c_proj.bias"), R"([null])");
  EXPECT_EQ(layout("ln_f.gamma"), R"([null])");
  EXPECT_EQ(j["parameters"]["wte.embeddings"]["shape"].dump(), "[67,24]");
  EXPECT_FALSE(j["collectives"].empty());
  EXPECT_GT(j["bytes_per_device"]["total"].get<int64_t>(), 0);
  // A layout map file gives the same plan for the weights it names.
  std::string map = write("layout.json", R"({"wte\\.embeddings": ["model", null]})");
  Result rk = run("plan --model test --mesh model=2 --batch 4 --seq 8 --json --plan " + map);
  ASSERT_EQ(rk.code, 0) << rk.output;
  auto k = nlohmann::json::parse(rk.output);
  EXPECT_EQ(k["parameters"]["wte.embeddings"]["layout"].dump(), R"(["model",null])");
  EXPECT_EQ(k["parameters"]["h.0.mlp.c_fc.kernel"]["layout"].dump(), R"([null,null])");
}

// AutoShard explains its plan and exports the problem it solved, which
// `autoshard solve` reads back and solves to no worse a cost.
TEST_F(Cli, AutoPlanExplainsAndExportsItsProblem) {
  const std::string problem = (dir_ / "problem.json").string();
  Result r =
      run("plan --model test --mesh data=2,model=2 --batch 4 --seq 8 --json --plan-time 0.3"
          " --export-problem " +
          problem);
  ASSERT_EQ(r.code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  const std::string first = j["reasons"][0].get<std::string>();
  EXPECT_NE(first.find("predicted"), std::string::npos) << first;
  EXPECT_NE(first.find("per device"), std::string::npos) << first;
  Result s = run("solve " + problem + " --time-limit 1");
  ASSERT_EQ(s.code, 0) << s.output;
  EXPECT_NE(s.output.find("best: cost"), std::string::npos) << s.output;
  // A budget no plan meets is one clear error.
  Result tight = run("plan --model test --mesh model=2 --batch 4 --seq 8 --memory-per-device 1KiB");
  EXPECT_EQ(tight.code, 1);
  EXPECT_NE(tight.output.find("no plan of this step fits in"), std::string::npos) << tight.output;
  Result bad = run("plan --model test --mesh model=2 --memory-per-device 12XB");
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.output.find("--memory-per-device"), std::string::npos) << bad.output;
}

// Kills training with SIGKILL at fixed, named points (AUTOSHARD_CRASH_AT,
// see io/crash_point.h), then resumes: the resumed steps must give bitwise
// the losses of a run that was never interrupted, from the last checkpoint
// that was complete, and no temporary is left behind.
class CliKill : public Cli {
 protected:
  const std::string args = "train --model tiny --batch 4 --seq 32 --steps 12 --sample 0 --lr 3e-3";
  std::string ckpt() const { return (dir_ / "ckpt").string(); }
  std::vector<double> uninterrupted() {
    const std::string ref = (dir_ / "ref.jsonl").string();
    EXPECT_EQ(run(args + " --log " + ref).code, 0);
    return logged_losses(ref);
  }
  int crash(const std::string& point) {
    const std::string cmd = "AUTOSHARD_CRASH_AT=" + point + " " + std::string(AUTOSHARD_CLI) + " " +
                            args + " --checkpoint-dir " + ckpt() +
                            " --save-every 4 > /dev/null 2>&1";
    const int status = std::system(cmd.c_str());
    return WIFSIGNALED(status) ? WTERMSIG(status) : (WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  Result resume() {
    return run(args + " --checkpoint-dir " + ckpt() + " --save-every 4 --resume --log " +
               (dir_ / "resumed.jsonl").string());
  }
  void expect_resumed_from(int first_step, const std::vector<double>& want) {
    std::ifstream in(dir_ / "resumed.jsonl");
    std::string line;
    int expected = first_step;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      ASSERT_EQ(j["step"].get<int>(), expected);
      EXPECT_EQ(j["loss"].get<double>(), want[expected - 1]) << "step " << expected;
      ++expected;
    }
    EXPECT_EQ(expected, 13) << "the resumed run ends at step 12";
    for (const auto& e : fs::directory_iterator(ckpt())) {
      const std::string name = e.path().filename().string();
      EXPECT_TRUE(name.rfind("step-", 0) == 0) << "leftover " << e.path();
    }
  }
};

TEST_F(CliKill, BeforeTheFirstSaveNothingToResume) {
  const std::vector<double> want = uninterrupted();
  // The shell reports a process killed by a signal as 128 + SIGKILL.
  const int code = crash("train.step:2");
  EXPECT_TRUE(code == SIGKILL || code == 128 + SIGKILL) << code;
  Result r = resume();
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("no checkpoint in"), std::string::npos) << r.output;
}

TEST_F(CliKill, DuringASaveResumesFromThePreviousOne) {
  const std::vector<double> want = uninterrupted();
  crash("checkpoint.write:2");  // the save of step 8, half written
  Result r = resume();
  ASSERT_EQ(r.code, 0) << r.output;
  expect_resumed_from(5, want);
}

TEST_F(CliKill, JustBeforeASaveIsRenamedResumesFromThePreviousOne) {
  const std::vector<double> want = uninterrupted();
  crash("checkpoint.rename:2");  // the save of step 8, complete but not in place
  Result r = resume();
  ASSERT_EQ(r.code, 0) << r.output;
  expect_resumed_from(5, want);
}

TEST_F(CliKill, BetweenSavesResumesFromTheLastOne) {
  const std::vector<double> want = uninterrupted();
  crash("checkpoint.done:2");  // saved at 4 and 8, killed while training on
  Result r = resume();
  ASSERT_EQ(r.code, 0) << r.output;
  expect_resumed_from(9, want);
}

void expect_error(const Result& r, const std::string& needle) {
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("autoshard: error: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

TEST_F(Cli, BadInputGetsOneLineErrors) {
  expect_error(run("train --model " + (dir_ / "missing.json").string()),
               "cannot open model config");
  expect_error(run("train --model " + write("bad.json", "{not json")), "not valid JSON");
  expect_error(run("train --model " + write("partial.json", R"({"n_layer": 2, "n_head": 2})")),
               "lacks \"n_embd\"");
  expect_error(run("train --model " + write("odd.json", R"({"n_layer": 1, "n_head": 3, "n_embd": 8,
               "vocab_size": 256, "n_positions": 16})")),
               "multiple of n_head");
  expect_error(run("train --model nonsense"), "unknown model preset");
  expect_error(run("train --model tiny --data " + write("short.txt", "too short")), "needs");
  expect_error(run("train --model tiny --seq 65"), "n_positions");
  std::string bin = {'\x2c', '\x01', 0, 0, 1, 0, 2, 0};  // id 300 first
  for (int i = 0; i < 200; ++i) bin += "\x01";
  expect_error(run("train --model tiny --batch 1 --seq 8 --data " + write("ids.bin", bin)),
               "holds token id");
  expect_error(run("train --data " + (dir_ / "nope.txt").string()),
               "data file '" + (dir_ / "nope.txt").string() + "' cannot be read");
  expect_error(run("train --model tiny --data " + write("odd.bin", "abc")), "odd number of bytes");
  expect_error(run("train --mesh data=2,model=x"), "is not an integer");
  expect_error(run("train --mesh model=1000"), "at most 256");
  expect_error(run("train --mesh model=2 --plan " + (dir_ / "none.json").string()),
               "no layout map file");
  expect_error(
      run("train --mesh model=2 --plan " + write("axis.json", R"({"kernel": ["tensor"]})")),
      "mesh axis 'tensor'");
  expect_error(run("train --model tiny --seq 16 --mesh model=2 --plan " +
                   write("rank.json", R"({"c_fc\\.bias": ["model", null]})")),
               "has 2 axes");
}

}  // namespace
