// A hostile but realistic user, table-driven: for every family of bad input
// the command ends with exit code 1 and exactly one line
// "autoshard: error: ..." that names the offending flag, field, tensor or
// file, and leaves no temporary file behind. Never a signal, a hang, an
// "internal error", or exit 0 on nonsense.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "autoshard/error.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/models/gpt2/formats.h"
#include "cli_runner.h"
#include "test_util.h"

namespace autoshard {
namespace {

using cli_runner::count;
using cli_runner::Result;
using cli_runner::run;

namespace fs = std::filesystem;

class BadInput : public testing::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return path(name);
  }
  std::string config(const std::string& fields) { return write("config.json", "{" + fields + "}"); }
  // A tiny GPT-2 config with one field replaced or added.
  std::string tiny_with(const std::string& key, const std::string& value) {
    nlohmann::json j = {
        {"n_layer", 2}, {"n_head", 4}, {"n_embd", 64}, {"vocab_size", 256}, {"n_positions", 64}};
    j[key] = nlohmann::json::parse(value);
    return write(key + ".json", j.dump());
  }
  // A Hugging Face directory of the `test` preset.
  std::string hf_dir() {
    GPT2 model(GPT2Config::preset("test"), 16, 1);
    save_hf_gpt2(model, path("hf"));
    return path("hf");
  }
  // Expects the contract: exit 1, one error line, naming `needle`, and no
  // temporaries left in the test directory.
  void expect_error(const std::string& args, const std::string& needle,
                    const std::string& env = "") {
    SCOPED_TRACE(args);
    const Result r = run(args, env);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_EQ(count(r.output, "internal error"), 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "wanted '" << needle << "' in\n"
                                                        << r.output;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) {
      const std::string name = e.path().filename().string();
      EXPECT_TRUE(name.find(".tmp") == std::string::npos) << "leftover " << e.path();
    }
  }
};

TEST_F(BadInput, SizesThatWouldWrap) {
  expect_error("train --model tiny --batch 4611686018427387904 --seq 4",
               "--batch 4611686018427387904 is out of range");
  expect_error("eval --model tiny --batch 4611686018427387904 --seq 4",
               "--batch 4611686018427387904 is out of range");
  expect_error("train --model tiny --batch 2000000000 --seq 64", "needs");  // B x T vs the data
  expect_error("eval --model tiny --batch 2000000000 --seq 64", "use a smaller --batch");
  expect_error("plan --mesh data=65536,model=65536", "more than 16777216 devices");
  expect_error("train --model " + tiny_with("n_positions", "4611686018427387904"),
               "\"n_positions\" = 4611686018427387904 is out of range");
  expect_error("train --batch 99999999999999999999999", "--batch 99999999999999999999999 is out");
  expect_error("train --seed 18446744073709551616", "--seed 18446744073709551616 is out of range");
  expect_error("train --seed -1", "--seed needs a non-negative integer");
  expect_error("train --mesh model=1000", "at most 256 in-process devices");
}

TEST_F(BadInput, ModelsTooBigForTheMachine) {
  expect_error("train --model " + tiny_with("n_embd", "1099511627776"),
               "\"n_embd\" = 1099511627776 is out of range");
  expect_error("train --model " + tiny_with("vocab_size", "3000000000"),
               "\"vocab_size\" = 3000000000 is out of range");
  // In range but beyond the memory there is: the field and the sizes named.
  expect_error("train --model " + tiny_with("n_embd", "8192"), "n_embd = 8192",
               "AUTOSHARD_MEMORY_LIMIT=1G");
  expect_error("train --model " + tiny_with("n_embd", "8192"), "1 GiB is available",
               "AUTOSHARD_MEMORY_LIMIT=1G");
  // A predicted plan beyond the cluster's memory: by how much, and the
  // remedies not tried yet (bf16 was).
  const std::string gpt3 =
      "plan --model gpt3-175b --batch 1536 --seq 2048 --mesh data=128,model=8 --plan megatron "
      "--predict --cluster a100-80g --dtype bf16";
  expect_error(gpt3, "the plan does not fit: ");
  expect_error(gpt3, "but cluster 'a100-80g' has 81920.00 MiB");
  expect_error(gpt3,
               "--plan auto (it can split weights and optimizer state over data), --recompute");
  EXPECT_EQ(run(gpt3).output.find("--dtype bf16"), std::string::npos);
}

// llm.c headers claiming sizes their file does not hold: no allocation, no
// hours of reading.
TEST_F(BadInput, LlmcHeadersAreCheckedAgainstTheFile) {
  auto llmc = [&](const std::string& name, int32_t layers, int32_t channels) {
    std::string bytes(256 * 4, '\0');
    int32_t h[8] = {20240326, 3, 64, 256, layers, 4, channels, 256};
    std::memcpy(bytes.data(), h, sizeof h);
    bytes += std::string(483 * 1024, '\1');
    return write(name, bytes);
  };
  const auto start = std::chrono::steady_clock::now();
  expect_error("train --weights " + llmc("layers.bin", 2147483647, 64),
               "a truncated or corrupt llm.c file");
  expect_error("train --weights " + llmc("wide.bin", 2, 1 << 30),
               "a truncated or corrupt llm.c file");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(BadInput, TensorsOfTheRightSizeButTheWrongShape) {
  const std::string dir = hf_dir();
  const std::string file = dir + "/model.safetensors";
  SafetensorsFile f(file);
  auto rewrite = [&](const std::string& name, const Shape& shape) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const SafetensorsEntry& e : f.entries()) {
      Tensor t = f.load(e.name);
      tensors.emplace_back(e.name, e.name == name ? t.reshaped(shape) : t);
    }
    const std::string out = path("bad_" + name);
    fs::create_directories(out);
    fs::copy_file(dir + "/config.json", out + "/config.json");
    save_safetensors(out + "/model.safetensors", tensors);
    return out;
  };
  expect_error("train --steps 1 --weights " + rewrite("wte.weight", {24, 67}),
               "tensor 'wte.weight' has shape [24, 67] but weight 'wte.embeddings' needs [67, 24]");
  expect_error("train --steps 1 --weights " + rewrite("h.0.attn.c_attn.weight", {72, 24}),
               "'h.0.attn.c_attn.weight' has shape [72, 24]");
  expect_error("train --steps 1 --weights " + rewrite("h.1.mlp.c_fc.weight", {2304}),
               "'h.1.mlp.c_fc.weight' has shape [2304]");
  expect_error("train --steps 1 --weights " + rewrite("wpe.weight", {16, 24, 1}),
               "'wpe.weight' has shape [16, 24, 1]");
}

TEST_F(BadInput, CorruptCheckpoints) {
  const std::string ckpt = path("ckpt");
  const std::string args = "train --model tiny --steps 2 --sample 0 --checkpoint-dir " + ckpt;
  ASSERT_EQ(run(args).code, 0);
  const std::string state = ckpt + "/step-00000002/state.json";
  nlohmann::json good;
  std::ifstream(state) >> good;
  auto with_state = [&](const nlohmann::json& j) { std::ofstream(state) << j.dump(); };
  nlohmann::json j = good;
  j["step"] = "4";
  with_state(j);
  expect_error(args + " --resume", "\"step\" must be a whole number >= 0, got \"4\"");
  j = good;
  j.erase("step");
  with_state(j);
  expect_error(args + " --resume", "lacks \"step\"");
  with_state(nlohmann::json::array({1, 2}));
  expect_error(args + " --resume", "must be a JSON object");
  j = good;
  j["data_position"] = -100;
  with_state(j);
  expect_error(args + " --resume", "\"data_position\" must be a whole number >= 0, got -100");
  with_state(good);
  expect_error(args + " --resume --batch 4", "was trained with --batch 16, this run has 4");
  fs::remove(ckpt + "/step-00000002/optimizer.safetensors");
  expect_error(args + " --resume", "has no optimizer.safetensors");
  fs::create_directories(path("empty"));
  expect_error("train --model tiny --steps 2 --checkpoint-dir " + path("empty") + " --resume",
               "no checkpoint in");
}

TEST_F(BadInput, NumbersThatAreNotNumbers) {
  expect_error("train --lr nan", "--lr must be a finite number");
  expect_error("train --lr inf", "--lr must be a finite number");
  expect_error("train --weight-decay nan", "--weight-decay must be a finite number");
  expect_error("train --model " + tiny_with("layer_norm_epsilon", "-1"), "\"layer_norm_epsilon\"");
  expect_error("train --lr -1", "--lr -1 is out of range");
  expect_error("train --lr 0", "--lr 0 is out of range");
  expect_error("train --weight-decay -5", "--weight-decay -5 is out of range");
  expect_error("train --clip -1", "--clip -1 is out of range");
  expect_error("train --clip nan", "--clip must be a finite number");
  expect_error("train --save-every -1", "--save-every -1 is out of range");
  expect_error("train --keep -1", "--keep -1 is out of range");
  expect_error("train --devices -3", "--devices -3 is out of range");
  expect_error("plan --batch 0", "--batch 0 is out of range");
  expect_error("plan --batch -8", "--batch -8 is out of range");
}

TEST_F(BadInput, ALossThatBecomesNanStopsTrainingNamingTheStep) {
  const std::string log = path("log.jsonl");
  const Result r =
      run("train --model tiny --lr 1000 --clip 0 --lr-schedule constant --steps 200 --log " + log);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("training diverged: the loss is"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("at step"), std::string::npos) << r.output;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) EXPECT_EQ(line.find("null"), std::string::npos) << line;
}

TEST_F(BadInput, SilentMisreadings) {
  expect_error("train --model " + tiny_with("n_layer", "2.7"),
               "\"n_layer\" must be a whole number");
  expect_error("train --model " + tiny_with("model_type", "\"bert\""),
               "\"model_type\" is 'bert', which this build does not know");
  expect_error("train --model " + tiny_with("n_head", "\"4\""),
               "\"n_head\" must be a whole number");
  // plan takes the config from --weights, as train and eval do.
  const Result r = run("plan --json --mesh model=2 --batch 2 --seq 8 --weights " + hf_dir());
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["parameters"]["wte.embeddings"]["shape"].dump(),
            "[67,24]");
  // A layout map key that matches no weight: a warning, and an error under --strict.
  const std::string map = write("map.json", R"({"no_such_weight": ["model"]})");
  const Result w = run("plan --mesh model=2 --plan " + map);
  EXPECT_EQ(w.code, 0) << w.output;
  EXPECT_NE(w.output.find("warning: layout map key 'no_such_weight' matches no weight"),
            std::string::npos)
      << w.output;
  expect_error("plan --mesh model=2 --strict --plan " + map,
               "layout map key 'no_such_weight' matches no weight");
  // Spaces around mesh axis names are not part of the names.
  const Result m = run("plan --json --mesh 'data=1, model=2'");
  ASSERT_EQ(m.code, 0) << m.output;
  EXPECT_EQ(nlohmann::json::parse(m.output)["mesh"].dump(), R"({"data":1,"model":2})");
  expect_error("plan --mesh 'da ta=2'", "axis name 'da ta'");
}

TEST_F(BadInput, FilesystemMistakes) {
  const std::string hf = hf_dir();
  fs::create_directories(path("exists"));
  expect_error("convert " + hf + " " + path("exists"), "already exists");
  write("plain", "x");
  expect_error("convert " + hf + " " + path("plain") + "/out", "is not a directory");
  expect_error("convert " + hf + " /proc/autoshard_out", "/proc/autoshard_out");
  expect_error("train --steps 1 --checkpoint-dir " + path("plain"), "is a file, not a directory");
}

TEST_F(BadInput, CommandLineMistakesShareOneFormat) {
  expect_error("train --batch abc", "--batch needs an integer, got 'abc'");
  expect_error("train --bogus", "--bogus");
  expect_error("frobnicate", "frobnicate");
  expect_error("train --batch", "--batch");
  expect_error("convert only_in", "OUT");
  expect_error("train --plan Megatron --mesh model=2", "is none of auto, data, fsdp, megatron");
  expect_error("train --plan fsdp --mesh model=2", "--plan fsdp splits every weight over the data");
  expect_error("train --sampling sideways", "sideways");
}

TEST_F(BadInput, CheckpointsAreWrittenAtTheEndAndOnSignals) {
  // --checkpoint-dir alone saves the last step.
  ASSERT_EQ(run("train --model tiny --steps 3 --sample 0 --checkpoint-dir " + path("end")).code, 0);
  EXPECT_TRUE(fs::exists(path("end") + "/step-00000003/model.safetensors"));
  // SIGINT mid-run: the step in progress finishes, is saved, and the exit
  // code says so (128 + 2); the periodic checkpoint before it stays intact.
  const std::string log = path("sig.jsonl");
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = std::string(AUTOSHARD_CLI) +
                            " train --model tiny --steps 1000000 --sample 0 --save-every 5 "
                            "--checkpoint-dir " +
                            path("sig") + " --log " + log + " > /dev/null 2>&1";
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  for (int i = 0; i < 300; ++i) {  // wait for step 7 to be logged
    std::ifstream in(log);
    int lines = 0;
    for (std::string l; std::getline(in, l);) ++lines;
    if (lines >= 7) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(pid, SIGINT);
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status)) << "signal " << (WIFSIGNALED(status) ? WTERMSIG(status) : -1)
                                 << " (a crash: rerun with core dumps on)";
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  int64_t last = 0;
  for (const auto& e : fs::directory_iterator(path("sig"))) {
    const std::string name = e.path().filename().string();
    ASSERT_EQ(name.rfind("step-", 0), 0u) << name;
    EXPECT_TRUE(fs::exists(e.path() / "state.json")) << name;
    last = std::max<int64_t>(last, std::stoll(name.substr(5)));
  }
  EXPECT_TRUE(fs::exists(path("sig") + "/step-00000005/state.json"));
  EXPECT_GE(last, 7);
}

// The C++ API keeps the same contract: autoshard::Error, never an std::
// exception from inside.
TEST(ApiErrors, BadArgumentsThrowAutoshardErrors) {
  auto expect_autoshard_error = [](const char* what, auto f) {
    try {
      f();
      ADD_FAILURE() << what << ": no error";
    } catch (const Error&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << typeid(e).name() << ": " << e.what();
    }
  };
  expect_autoshard_error("bad regex", [] {
    LayoutMap m;
    m["(unclosed"];
  });
  expect_autoshard_error("bad mesh", [] { DeviceMesh::parse("data=two"); });
  expect_autoshard_error("bad config", [] { GPT2Config::from_json_text("[1]", "x"); });
  expect_autoshard_error("bad state", [] { parse_state("{\"format\": 3}", "x"); });
  expect_autoshard_error("negative shape", [] { Tensor t({2, -3}); });
  expect_autoshard_error("missing checkpoint", [] {
    GPT2 model(GPT2Config::preset("test"), 8);
    load_checkpoint(model, "/nonexistent/ckpt");
  });
  expect_autoshard_error("checkpoint dir under a file", [] {
    CheckpointManager m(CheckpointOptions{.directory = "/proc/self/status/x"});
  });
  expect_autoshard_error("missing safetensors",
                         [] { SafetensorsFile f("/nonexistent.safetensors"); });
  expect_autoshard_error("unknown weight", [] {
    GPT2 model(GPT2Config::preset("test"), 8);
    model.gather_weight("h.9.attn.query.kernel");
  });
  expect_autoshard_error("hf save under a file", [] {
    GPT2 model(GPT2Config::preset("test"), 8);
    save_hf_gpt2(model, "/proc/self/status/out");
  });
}

}  // namespace
}  // namespace autoshard
