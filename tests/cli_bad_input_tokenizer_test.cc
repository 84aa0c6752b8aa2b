// Hostile input to the tokenizer readers, table-driven like
// cli_bad_input_test.cc: tokenizer.json files with patterns that backtrack
// exponentially, ids far beyond their vocabulary or given twice, wrong JSON
// types, stages nested thousands deep, hundreds of thousands of added
// tokens; FIFOs and directories where a tokenizer file should be; text data
// larger than memory allows. Each ends within seconds with exit code 1 and
// exactly one line "autoshard: error: ..." naming the file, the JSON path and
// the fix; never a hang, an "internal error", or exit 0 on nonsense. Valid
// input that was refused (a non-ASCII prompt of a byte-level model) works.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
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
using Json = nlohmann::json;

// A tokenizer fixture of tests/data/tokenizers ("byte_bpe": 271 ids, GPT-2's
// byte-level kind; "wordpiece": BERT's kind).
Json fixture(const std::string& kind = "byte_bpe") {
  std::ifstream in(std::string(AUTOSHARD_TEST_DATA) + "/tokenizers/" + kind + "/tokenizer.json");
  return Json::parse(in);
}

// `n` stages of `type` nested in one another around `inner`, as raw JSON.
std::string nested(const std::string& type, const std::string& list, int n,
                   const std::string& inner) {
  std::string s;
  for (int i = 0; i < n; ++i) s += R"({"type":")" + type + R"(",")" + list + R"(":[)";
  s += inner;
  for (int i = 0; i < n; ++i) s += "]}";
  return s;
}

class BadTokenizerInput : public testing::TempDirTest {
 protected:
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& content) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::binary) << content;
    return path(name);
  }
  // A model directory `name` holding `tokenizer` as tokenizer.json and a
  // small Llama config whose vocabulary (300) covers the byte-level fixture.
  std::string model_dir(const std::string& name, const Json& tokenizer) {
    return model_dir_raw(name, tokenizer.dump());
  }
  std::string model_dir_raw(const std::string& name, const std::string& tokenizer_json) {
    write(name + "/tokenizer.json", tokenizer_json);
    std::ifstream in(std::string(AUTOSHARD_TEST_DATA) + "/hf_llama/config.json");
    Json config = Json::parse(in);
    config["vocab_size"] = 300;
    write(name + "/config.json", config.dump());
    return path(name);
  }
  // Expects the contract: exit 1, one error line naming `needle`, in seconds.
  void expect_error(const std::string& args, const std::string& needle, const std::string& env = "",
                    double seconds = 10) {
    SCOPED_TRACE(args.substr(0, 300));
    const Result r = run(args, env);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_EQ(count(r.output, "internal error"), 0) << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "wanted '" << needle << "' in\n"
                                                        << r.output;
    EXPECT_LT(r.seconds, seconds) << r.output;
  }
  // `tokenize --text` under the fixture after `edit`, expected to fail so.
  void expect_tokenize_error(const std::function<void(Json&)>& edit, const std::string& needle,
                             const std::string& kind = "byte_bpe") {
    Json j = fixture(kind);
    edit(j);
    expect_error("tokenize --text 'ab cd' --weights " + model_dir("t", j), needle);
  }
};

// F01: each text's regular-expression work is bounded (across all of its
// pieces, so many short pieces cannot add up to hours either), in tokenize,
// generate --prompt and train --data alike.
TEST_F(BadTokenizerInput, RegexesThatBacktrackExponentiallyStopWithinSeconds) {
  Json j = fixture();
  j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "(x+x+)+y"}}}, {"content", "z"}};
  const std::string replace = model_dir("replace", j);
  const std::string xs(36, 'x');
  const std::string pattern = "normalizer.pattern.Regex: the regular expression '(x+x+)+y'";
  expect_error("tokenize --weights " + replace + " --text " + xs, pattern);
  expect_error("generate --model " + replace + " --max-new-tokens 1 --prompt " + xs, pattern);
  std::string data;
  for (int i = 0; i < 2000; ++i) data += xs + "\n";
  expect_error(
      "train --model " + replace + " --steps 1 --batch 1 --seq 8 --data " + write("xs.txt", data),
      pattern);
  // A thousand pieces, each of them cheap alone.
  j = fixture();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "WhitespaceSplit"}},
        {{"type", "Split"}, {"pattern", {{"Regex", "^(b|b)+$"}}}, {"behavior", "Isolated"}}}}};
  std::string text;
  for (int i = 0; i < 1000; ++i) text += std::string(17, 'b') + "! ";
  expect_error("tokenize --weights " + model_dir("pieces", j) + " --text '" + text + "'",
               "'^(b|b)+$' needs too much work");
}

// F07: ids are bounded by the number of entries the file defines, checked
// before anything is allocated.
TEST_F(BadTokenizerInput, IdsFarBeyondTheVocabulary) {
  expect_tokenize_error([](Json& j) { j["model"]["vocab"]["far"] = 50000000; },
                        "model.vocab.far: token 'far' has the id 50000000, outside 0 to");
  expect_tokenize_error(
      [](Json& j) {
        j["added_tokens"].push_back({{"content", "<far>"}, {"id", 2147483647}});
      },
      "added token '<far>' has the id 2147483647");
  expect_tokenize_error([](Json& j) { j["model"]["vocab"]["big"] = 4294967296 + 65; },
                        "model.vocab.big must be a whole number from 0 to 2147483647");
  const std::string gpt2 = path("gpt2");
  fs::create_directories(gpt2);
  fs::copy(std::string(AUTOSHARD_TEST_DATA) + "/tokenizers/gpt2_files", gpt2);
  std::ifstream in(gpt2 + "/vocab.json");
  Json vocab = Json::parse(in);
  in.close();
  vocab["Ġfar"] = 30000000;
  std::ofstream(gpt2 + "/vocab.json") << vocab.dump();
  expect_error("tokenize --text hi --weights " + gpt2, "token 'Ġfar' has the id 30000000");
}

// F06: an id given to two tokens (encoding and decoding would disagree),
// ids that are not whole numbers, options out of their domain.
TEST_F(BadTokenizerInput, IdsGivenTwiceAndOptionsOutOfTheirDomain) {
  expect_tokenize_error(
      [](Json& j) {
        j["added_tokens"].push_back({{"content", "<p>"}, {"id", 280}});
        j["added_tokens"].push_back({{"content", "<q>"}, {"id", 280}});
      },
      "added token '<q>' (id 280) clashes with added token '<p>'");
  expect_tokenize_error(
      [](Json& j) {
        j["added_tokens"].push_back({{"content", "<clash>"}, {"id", 65}});
      },
      "added token '<clash>' has the id 65 of the model's token 'b'");
  expect_tokenize_error([](Json& j) { j["model"]["vocab"]["half"] = 12.5; },
                        "model.vocab.half must be a whole number from 0 to 2147483647, not the "
                        "number 12.5");
  expect_tokenize_error(
      [](Json& j) {
        j["added_tokens"].push_back({{"content", "<n>"}, {"id", -1}});
      },
      "added_tokens[1].id must be a whole number from 0 to 2147483647, not the number -1");
  expect_tokenize_error(
      [](Json& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
      },
      "pre_tokenizer.replacement must be one character");
  expect_tokenize_error(
      [](Json& j) {
        j["decoder"] = {{"type", "Metaspace"}, {"replacement", ""}};
      },
      "decoder.replacement must be one character");
  expect_tokenize_error([](Json& j) { j["model"]["max_input_chars_per_word"] = 0; },
                        "model.max_input_chars_per_word must be a whole number from 1",
                        "wordpiece");
  expect_tokenize_error(
      [](Json& j) {
        j["post_processor"] = {
            {"type", "BertProcessing"}, {"cls", {"<c>", 5}}, {"sep", {"<s>", 999999}}};
      },
      "post_processor.sep[1] must be a whole number from 0 to 270");
}

// F02, F03: costs linear in the text and the file: many added tokens, words
// that must stand alone, and stages nested thousands deep (refused).
TEST_F(BadTokenizerInput, CostsStayLinear) {
  Json j = fixture();
  for (int i = 0; i < 100000; ++i)
    j["added_tokens"].push_back({{"content", "<w" + std::to_string(i) + ">"}, {"id", 300 + i}});
  std::string text;
  for (int i = 0; i < 1500; ++i) text += "a <w99999> b<w7> ";
  Result r = run("tokenize --no-special-tokens --weights " + model_dir("many", j) + " --text '" +
                 text + "'");
  EXPECT_EQ(r.code, 0) << r.output.substr(0, 300);
  EXPECT_EQ(r.output.substr(0, 24), "64,220,100299,220,65,307") << r.output.substr(0, 100);
  EXPECT_LT(r.seconds, 10);
  j = fixture();
  for (int i = 0; i < 3000; ++i)
    j["added_tokens"].push_back(
        {{"content", "c" + std::to_string(i)}, {"id", 300 + i}, {"single_word", true}});
  text.clear();
  for (int i = 0; i < 3000; ++i) text += "c1 xc1 c12c ";
  r = run("tokenize --no-special-tokens --weights " + model_dir("words", j) + " --text '" + text +
          "'");
  EXPECT_EQ(r.code, 0) << r.output.substr(0, 300);
  EXPECT_EQ(r.output.substr(0, 4), "301,") << r.output.substr(0, 100);
  EXPECT_LT(r.seconds, 10);
  // Nested thousands deep: refused at once, naming where.
  const auto with = [&](const std::string& key, const std::string& value) {
    Json k = fixture();
    k.erase(key);
    std::string s = k.dump();
    return s.insert(1, "\"" + key + "\":" + value + ",");
  };
  // Stages nested past the stages' limit (64), within JSON's (512 levels,
  // two per stage); deeper still, the parser refuses the file.
  expect_error("tokenize --text hi --weights " +
                   model_dir_raw("dec", with("decoder", nested("Sequence", "decoders", 200,
                                                               R"({"type":"Fuse"})"))),
               "nests more than 64 levels deep", "", 5);
  expect_error("tokenize --text hi --weights " +
                   model_dir_raw("norm", with("normalizer", nested("Sequence", "normalizers", 200,
                                                                   R"({"type":"NFC"})"))),
               "normalizer.normalizers[0].normalizers[0]", "", 5);
  expect_error("tokenize --text hi --weights " +
                   model_dir_raw("deep", with("decoder", nested("Sequence", "decoders", 20000,
                                                                R"({"type":"Fuse"})"))),
               "deeper than 512 levels", "", 5);
}

// F04, F05: a value of the wrong JSON type names its path; a directory
// where a tokenizer file should be names the file.
TEST_F(BadTokenizerInput, WrongJsonTypesNameTheirPath) {
  expect_tokenize_error([](Json& j) { j["model"]["type"] = 7; },
                        "model.type must be a string, not the number 7");
  expect_tokenize_error([](Json& j) { j["normalizer"] = "NFC"; },
                        "normalizer must be an object with a \"type\", not the string \"NFC\"");
  expect_tokenize_error(
      [](Json& j) {
        j["pre_tokenizer"] = {
            {"type", "Split"}, {"pattern", {{"Regex", 5}}}, {"behavior", "Isolated"}};
      },
      "pre_tokenizer.pattern.Regex must be a string, not the number 5");
  expect_tokenize_error(
      [](Json& j) {
        j["post_processor"] = {{"type", "Sequence"}, {"processors", {{"a", 1}}}};
      },
      "post_processor.processors must be an array, not an object");
  expect_tokenize_error(
      [](Json& j) {
        j["model"]["merges"].push_back({"a", 5});
      },
      "must be a string, not the number 5");
  expect_tokenize_error([](Json& j) { j["model"]["byte_fallback"] = "yes"; },
                        "model.byte_fallback must be true or false, not the string \"yes\"");
  expect_tokenize_error([](Json& j) { j["model"]["unk_token"] = {"[UNK]"}; },
                        "model.unk_token must be a string, not an array", "wordpiece");
  expect_tokenize_error(
      [](Json& j) {
        j["added_tokens"] = {{"a", 1}};
      },
      "added_tokens must be an array, not an object");
  write("gpt2/vocab.json", R"({"a": "1", "b": 2})");
  write("gpt2/merges.txt", "#version: 0.2\n");
  expect_error("tokenize --text hi --weights " + path("gpt2"),
               "vocab.json: a must be a whole number from 0 to 2147483647, not the string \"1\"");
  fs::create_directories(dir_ / "dirs/tokenizer.model");
  expect_error("tokenize --text hi --weights " + path("dirs"),
               "tokenizer.model '" + path("dirs") + "/tokenizer.model' is a directory");
}

// F19: a FIFO where a tokenizer file should be is refused, not read forever.
TEST_F(BadTokenizerInput, FifosAreRefused) {
  fs::create_directories(dir_ / "fifo");
  ASSERT_EQ(mkfifo(path("fifo/tokenizer.json").c_str(), 0600), 0);
  expect_error("tokenize --text hi --weights " + path("fifo"),
               "tokenizer.json '" + path("fifo") + "/tokenizer.json' is not a regular file", "", 5);
  fs::create_directories(dir_ / "sp");
  fs::copy_file(std::string(AUTOSHARD_TEST_DATA) + "/tokenizers/sentencepiece/tokenizer.model",
                dir_ / "sp/tokenizer.model");
  ASSERT_EQ(mkfifo(path("sp/tokenizer_config.json").c_str(), 0600), 0);
  expect_error("tokenize --text hi --weights " + path("sp"),
               "tokenizer_config.json '" + path("sp") + "/tokenizer_config.json' is not a regular",
               "", 5);
}

// F09: text data is tokenized a piece at a time, and ids that would outgrow
// the memory available stop with the file named.
TEST_F(BadTokenizerInput, TextDataBeyondMemoryIsNamed) {
  const std::string model = model_dir("m", fixture());
  std::string line = "the quick brown fox jumps over the lazy dog, café!\n";
  std::string data;
  while (data.size() < (size_t{3} << 20)) data += line;
  const std::string file = write("data.txt", data);
  expect_error("train --steps 1 --batch 1 --seq 8 --sample 0 --model " + model + " --data " + file,
               "--data '" + file + "': its token ids need", "AUTOSHARD_MEMORY_LIMIT=2M");
  const Result r =
      run("train --steps 1 --batch 1 --seq 8 --sample 0 --model " + model + " --data " + file);
  EXPECT_EQ(r.code, 0) << r.output;
}

// F15: valid text that was refused: bytes of a byte-level model are 0-255.
TEST_F(BadTokenizerInput, NonAsciiPromptsOfByteLevelModels) {
  const Result r = run("generate --model tiny --prompt 'naïve' --max-new-tokens 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const Json out = Json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(out["prompt_ids"], Json({110, 97, 195, 175, 118, 101}));
}

}  // namespace
}  // namespace autoshard
