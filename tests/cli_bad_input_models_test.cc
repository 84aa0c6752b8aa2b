// Bad input, round 2, the model families (issue 29): models too large to
// build, weights holding NaN or infinity, AUTOSHARD_* environment variables,
// lenient numbers and lists, errors that did not name their input, wrong JSON
// types in configs, and Qwen2's attention_bias. Each case ends with exit code
// 1 and exactly one line "autoshard: error: ..." naming the input, within
// seconds; the cases differ from the reproductions on purpose.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/formats.h"
#include "autoshard/parse.h"
#include "cli_runner.h"
#include "test_util.h"

namespace autoshard {
namespace {

using cli_runner::count;
using cli_runner::Result;
using cli_runner::run;

namespace fs = std::filesystem;

class BadModelInput : public testing::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // A copy of tests/data/NAME with its config.json's fields replaced (null
  // removes one).
  std::string model_dir(const std::string& name, const nlohmann::json& changes = {},
                        const std::string& copy = "") {
    const std::string to = path(copy.empty() ? name : copy);
    fs::copy(fs::path(AUTOSHARD_TEST_DATA) / name, to, fs::copy_options::recursive);
    nlohmann::json config = nlohmann::json::parse(std::ifstream(fs::path(to) / "config.json"));
    for (const auto& [key, value] : changes.items()) {
      if (value.is_null())
        config.erase(key);
      else
        config[key] = value;
    }
    std::ofstream(fs::path(to) / "config.json") << config.dump();
    return to;
  }
  std::string config_file(const std::string& name, const nlohmann::json& config) {
    std::ofstream(dir_ / name) << config.dump();
    return path(name);
  }
  // A Hugging Face GPT-2 directory of the `test` preset whose weight
  // `weight` holds `value` at one element.
  std::string gpt2_with(const std::string& weight, float value, const std::string& name) {
    GPT2 model(GPT2Config::preset("test"), 16, 1);
    Tensor w = model.gather_weight(weight);
    w.f32()[w.numel() / 2] = value;
    model.set_weight(weight, w);
    if (name.ends_with(".bin"))
      save_llmc_gpt2(model, path(name));
    else
      save_hf_gpt2(model, path(name));
    return path(name);
  }
  // Expects the contract: exit 1, one error line, naming `needle`.
  void expect_error(const std::string& args, const std::string& needle,
                    const std::string& env = "") {
    SCOPED_TRACE(env + " " + args);
    const Result r = run(args, env);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_EQ(count(r.output, "internal error"), 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "wanted '" << needle << "' in\n"
                                                        << r.output;
  }
  void expect_ok(const std::string& args, const std::string& env = "") {
    SCOPED_TRACE(env + " " + args);
    const Result r = run(args, env);
    EXPECT_EQ(r.code, 0) << r.output;
  }
};

// F08: every command checks the model against the memory before building a
// layer (plan counts the layers' bookkeeping only: it allocates no weight).
TEST_F(BadModelInput, ModelsTooLargeToBuildAreRefusedByEveryCommand) {
  const std::string deep_gpt2 = config_file("deep.json", {{"n_layer", 2000000},
                                                          {"n_head", 1},
                                                          {"n_embd", 4},
                                                          {"vocab_size", 256},
                                                          {"n_positions", 64}});
  expect_error("eval --model " + deep_gpt2 + " --batch 1 --seq 8 --batches 1",
               "n_layer = 2000000: building and tracing");
  expect_error("plan --model " + deep_gpt2 + " --batch 1 --seq 8", "n_layer = 2000000");
  const std::string deep_llama = model_dir("hf_llama", {{"num_hidden_layers", 700000}});
  expect_error("generate --model " + deep_llama + " --prompt-ids 1 --max-new-tokens 1",
               "num_hidden_layers = 700000", "AUTOSHARD_MEMORY_LIMIT=64GiB");
  const std::string deep_opt = model_dir("hf_opt", {{"num_hidden_layers", 3000}});
  expect_error("plan --model " + deep_opt + " --batch 1 --seq 8", "num_hidden_layers = 3000",
               "AUTOSHARD_MEMORY_LIMIT=1GiB");
  // Parameters: 4 bytes each to evaluate (the largest term named), none to plan.
  expect_error("eval --model gpt2-medium --batch 1 --seq 8 --batches 1",
               "n_layer = 24 x 12 n_embd^2 (n_embd = 1024) gives", "AUTOSHARD_MEMORY_LIMIT=300MB");
  expect_ok("plan --model gpt2-medium --batch 1 --seq 8 --mesh model=2 --plan megatron",
            "AUTOSHARD_MEMORY_LIMIT=300MB");
}

// F16: weights holding NaN or infinity are refused where they are read,
// naming the tensor and the file, in every format and on any mesh.
TEST_F(BadModelInput, NonFiniteWeightsAreNamed) {
  const std::string nan_dir = gpt2_with("h.1.mlp.c_fc.bias", NAN, "nan");
  expect_error("generate --weights " + nan_dir + " --prompt-ids 5,6 --max-new-tokens 3",
               "tensor 'h.1.mlp.c_fc.bias' in '" + nan_dir + "/model.safetensors' holds NaN");
  const std::string inf_dir = gpt2_with("ln_f.gamma", -INFINITY, "inf");
  expect_error(
      "generate --weights " + inf_dir + " --prompt-ids 5,6 --max-new-tokens 3 --mesh model=2",
      "ln_f.weight' in '");
  expect_error("generate --weights " + inf_dir + " --prompt-ids 5,6 --max-new-tokens 3",
               "holds an infinite value");
  EXPECT_FALSE(run("convert " + inf_dir + " " + path("out")).code == 0);
  EXPECT_FALSE(fs::exists(path("out")));
  const std::string llmc = gpt2_with("wpe.embeddings", NAN, "nan.bin");
  expect_error("generate --weights " + llmc + " --prompt-ids 5 --max-new-tokens 1",
               "tensor 'wpe' in '" + llmc + "' holds NaN");
}

// F13, F14: every AUTOSHARD_* variable is parsed strictly, range-checked,
// and named; an empty one counts as unset.
TEST_F(BadModelInput, EnvironmentVariablesAreCheckedAndNamed) {
  const std::string eval = "eval --model tiny --batch 2 --seq 8 --batches 1";
  for (const char* limit : {"lots", "-2GiB", "0B", "inf", "1e25", "8 GiB", "0x4000", "12G!"})
    expect_error(eval, "AUTOSHARD_MEMORY_LIMIT",
                 std::string("AUTOSHARD_MEMORY_LIMIT='") + limit + "'");
  expect_error("train --model gpt2 --steps 1 --batch 1 --seq 8", "but 200 MiB is available",
               "AUTOSHARD_MEMORY_LIMIT=200MiB");
  expect_error("train --model gpt2 --steps 1 --batch 1 --seq 8", "but 954 MiB is available",
               "AUTOSHARD_MEMORY_LIMIT=1GB");
  expect_ok(eval, "AUTOSHARD_MEMORY_LIMIT=3G");
  for (const char* threads : {"5000", "-3", "4 ", "two", "0x2"})
    expect_error(eval, "AUTOSHARD_THREADS", std::string("AUTOSHARD_THREADS='") + threads + "'");
  expect_ok(eval, "AUTOSHARD_THREADS= ");
  expect_ok(eval, "AUTOSHARD_THREADS=1");
  expect_error(eval, "AUTOSHARD_MPI_MAX_COUNT 9999999999 is out of range",
               "AUTOSHARD_MPI_MAX_COUNT=9999999999");
  expect_error(eval, "AUTOSHARD_CRASH_AT", "AUTOSHARD_CRASH_AT=train.step:0");
  expect_error(eval, "needs a crash point name", "AUTOSHARD_CRASH_AT=:3");
}

// F23: one strict parser for integers, lists and sizes.
TEST_F(BadModelInput, NumbersListsAndSizesAreStrict) {
  const std::string llama = std::string(AUTOSHARD_TEST_DATA) + "/hf_llama";
  const std::string gen = "generate --weights " + llama + " --max-new-tokens 1 --prompt-ids ";
  expect_error(gen + ",7", "has an empty id at character 1");
  expect_error(gen + "7,,8", "has an empty id at character 3");
  expect_error(gen + "'7, 8'", "--prompt-ids needs an integer, got ' 8'");
  expect_error(gen + "0x7", "--prompt-ids needs an integer, got '0x7'");
  for (const char* size : {"0.25B", "0x40", "1.5B", "3 MB", "-1KB", "1e30"})
    expect_error("convert " + llama + " " + path("out") + " --max-shard-size '" + size + "'",
                 "--max-shard-size");
  EXPECT_FALSE(fs::exists(path("out")));
  expect_error("plan --model tiny --memory-per-device 0x1p30", "--memory-per-device needs a size");
  expect_error("plan --model tiny --plan-time 0x10", "--plan-time needs");
  // --zero1 shards over the data axis: a mesh without one is an error.
  expect_error("plan --model tiny --batch 2 --seq 8 --mesh model=3 --zero1",
               "the mesh model=3 has none");
  expect_error("train --model tiny --batch 2 --seq 8 --steps 1 --zero1", "this run has one device");
  // eos_token_id: a token id, never wrapped (2^32 + 7 is not 7).
  for (const char* eos : {"4294967303", "-1", "2.5", "\"2\""}) {
    const std::string dir =
        model_dir("hf_llama", {{"eos_token_id", nlohmann::json::parse(eos)}},
                  std::string("eos") + std::to_string(std::hash<std::string>{}(eos)));
    expect_error("generate --weights " + dir + " --prompt-ids 1,2 --max-new-tokens 2",
                 "\"eos_token_id\"");
  }
  // A shard name with a NUL byte is refused, not cut short.
  const std::string shards = model_dir("hf_llama", {}, "nul");
  nlohmann::json index =
      nlohmann::json::parse(std::ifstream(fs::path(shards) / "model.safetensors.index.json"));
  index["weight_map"]["lm_head.weight"] = std::string("model-00001-of-00002.safetensors\0.x", 35);
  std::ofstream(fs::path(shards) / "model.safetensors.index.json") << index.dump();
  expect_error("generate --weights " + shards + " --prompt-ids 1 --max-new-tokens 1",
               "no NUL byte");
}

// F25: errors name the flag or field the user gave.
TEST_F(BadModelInput, ErrorsNameTheInput) {
  const std::string narrow = model_dir("hf_llama", {{"hidden_size", 6},
                                                    {"num_attention_heads", 12},
                                                    {"num_key_value_heads", 3},
                                                    {"head_dim", nullptr}});
  expect_error("generate --weights " + narrow + " --prompt-ids 1 --max-new-tokens 1",
               "\"hidden_size\" = 6 is less than \"num_attention_heads\" = 12");
  expect_error("plan --model tiny --batch 2 --seq 100000", "--seq 100000 must be between 1");
  expect_error("eval --model tiny --batch 1000000000 --seq 64",
               "--batch 1000000000 x --seq 64: holding the step's token ids and logits");
  expect_error("train --model tiny --batch 8 --seq 2000000000 --steps 1", "--seq 2000000000");
}

// F04 (configs): a field of the wrong JSON type is named, never an internal error.
TEST_F(BadModelInput, WrongJsonTypesInConfigsAreNamed) {
  const std::pair<nlohmann::json, std::string> cases[] = {
      {{{"rope_scaling", {{"rope_type", "llama3"}, {"factor", "8"}}}}, "\"rope_scaling.factor\""},
      {{{"rope_scaling", {{"type", 7}}}}, "\"rope_scaling.type\""},
      {{{"rope_scaling", {1, 2}}}, "\"rope_scaling\" must be an object"},
      {{{"hidden_act", 1}}, "\"hidden_act\" must be a string"},
      {{{"attention_bias", "no"}}, "\"attention_bias\" must be true or false"},
      {{{"num_key_value_heads", 4}}, "\"num_attention_heads\" = 6 must be a multiple"},
  };
  int k = 0;
  for (const auto& [changes, needle] : cases) {
    const std::string dir = model_dir("hf_llama", changes, "c" + std::to_string(k++));
    expect_error("generate --weights " + dir + " --prompt-ids 1 --max-new-tokens 1", needle);
  }
}

// Qwen2 always has q, k and v biases: a config saying attention_bias false
// (which transformers ignores for Qwen2) loads and generates the same tokens.
TEST_F(BadModelInput, Qwen2IgnoresAttentionBias) {
  const std::string plain = std::string(AUTOSHARD_TEST_DATA) + "/hf_qwen2";
  const std::string with_key = model_dir("hf_qwen2", {{"attention_bias", false}});
  const std::string args = " --prompt-ids 3,4,5 --max-new-tokens 4 --temperature 0 --json";
  const Result a = run("generate --weights " + plain + args);
  const Result b = run("generate --weights " + with_key + args);
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(nlohmann::json::parse(a.output)["output_ids"],
            nlohmann::json::parse(b.output)["output_ids"]);
}

// The one parser of sizes, from the C++ API.
TEST(ParseByteSize, UnitsAndWholeBytes) {
  EXPECT_EQ(parse_byte_size("s", "4096"), 4096);
  EXPECT_EQ(parse_byte_size("s", "1.5KB"), 1500);
  EXPECT_EQ(parse_byte_size("s", "2K"), 2048);
  EXPECT_EQ(parse_byte_size("s", "1.25GiB"), 1342177280);
  EXPECT_EQ(parse_byte_size("s", "1e3B"), 1000);
  EXPECT_EQ(parse_byte_size("s", "4TB"), 4000000000000);
  for (const char* bad :
       {"", "B", "0.5B", "0.3KiB", "0x10", "+5", " 5", "5 ", "nan", "1e19TiB", "5kb", "5iB"})
    EXPECT_THROW(parse_byte_size("s", bad), Error) << bad;
  EXPECT_THROW(parse_integer("n", "12abc", 0, 100), Error);
  EXPECT_THROW(parse_integer("n", "101", 0, 100), Error);
  EXPECT_THROW(parse_number("x", "0x1p3", 0, 100), Error);
  EXPECT_THROW(parse_number("x", "inf", 0, 1e300), Error);
  EXPECT_DOUBLE_EQ(parse_number("x", "6e-4", 0, 1), 6e-4);
}

}  // namespace
}  // namespace autoshard
