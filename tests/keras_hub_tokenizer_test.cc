// KerasHub tokenizers of Llama 3 and Qwen (byte-level BPE with their own
// splitting expressions) from a preset's assets, against the Hugging Face
// tokenizer.json of the same vocabulary; and the end token KerasHub packs
// after a training text. Fixtures: tools/make_tokenizer_fixtures.py
// (tests/data/tokenizers/{llama3,qwen2}_hub) and
// tools/make_keras_hub_presets.py (tests/data/keras_hub/tokenizers/).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/io/tokenizer.h"
#include "io/tokenizer/pipeline.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

const std::string kPresets = std::string(AUTOSHARD_TEST_DATA) + "/keras_hub/tokenizers/";
const std::string kFiles = std::string(AUTOSHARD_TEST_DATA) + "/tokenizers/";

// Where Llama 3's and Qwen2's expressions cut otherwise than GPT-2's: digit
// runs, upper-case contractions, punctuation before letters, line ends after
// punctuation, whitespace runs, non-ASCII letters; and special tokens inside
// the text.
const std::vector<std::string> kTexts = {
    "Hello world's end: 12345 apples, I'M HERE & DON'T stop!!\n\n\n  spaces   and\ttabs\r\n",
    " café 中文的 x2024y ...",
    "Hello<|eot_id|> world<|end_of_text|><|endoftext|>'s<|im_start|>",
    "a  b\n",
    "é",
    "",
};

Ids with(Ids ids, std::optional<int32_t> front, std::optional<int32_t> back = std::nullopt) {
  if (front) ids.insert(ids.begin(), *front);
  if (back) ids.push_back(*back);
  return ids;
}

// Llama3Tokenizer and QwenTokenizer give the ids of the Hugging Face
// tokenizer.json of their vocabulary, special tokens whole; GPT-2's
// expression over the same files would not.
TEST(KerasHubTokenizer, Llama3AndQwenSplitAsTheirHuggingFaceFiles) {
  for (const auto& [preset, files] : {std::pair{"llama3", "llama3_hub"}, {"qwen2", "qwen2_hub"}}) {
    const auto kh = keras_hub::load_preset_tokenizer(kPresets + preset);
    const auto hf = load_tokenizer(kFiles + files);
    for (const std::string& t : kTexts) {
      EXPECT_EQ(kh->encode(t, false), hf->encode(t, false)) << preset << ": " << t;
      EXPECT_EQ(kh->decode(kh->encode(t, false), false), t) << preset;
    }
    const std::string assets = kPresets + preset + "/assets/tokenizer/";
    const auto gpt2 = tokenizer::gpt2_tokenizer(assets + "vocabulary.json", assets + "merges.txt");
    EXPECT_NE(gpt2->encode(kTexts[0], false), hf->encode(kTexts[0], false)) << preset;
  }
  const auto llama3 = keras_hub::load_preset_tokenizer(kPresets + "llama3");
  const auto qwen = keras_hub::load_preset_tokenizer(kPresets + "qwen2");
  // Llama 3 cuts digits in threes, Qwen2 one by one (the vocabularies agree
  // on every other id).
  const auto id = [&](const char* token) { return *llama3->token_to_id(token); };
  EXPECT_EQ(llama3->encode("12345", false), (Ids{id("123"), id("45")}));
  EXPECT_EQ(qwen->encode("12345", false), (Ids{id("1"), id("2"), id("3"), id("4"), id("5")}));
  // Start tokens as KerasHub's preprocessors pack them: Llama 3's
  // <|begin_of_text|> (its Hugging Face template's too); Qwen none.
  const auto llama3_hf = load_tokenizer(kFiles + "llama3_hub");
  const auto qwen_hf = load_tokenizer(kFiles + "qwen2_hub");
  for (const std::string& t : kTexts) {
    EXPECT_EQ(llama3->encode(t), llama3_hf->encode(t)) << t;
    EXPECT_EQ(qwen->encode(t), qwen_hf->encode(t)) << t;
    EXPECT_EQ(qwen->encode(t), qwen->encode(t, false)) << t;
  }
  EXPECT_EQ(llama3->encode("Hello").front(), id("<|begin_of_text|>"));
  // Special tokens are skipped in decoding when asked.
  EXPECT_EQ(llama3->decode(llama3->encode(kTexts[2])), "Hello world<|endoftext|>'s<|im_start|>");
}

class KerasHubTrainingText : public testing::TempDirTest {
 protected:
  // `text` as a file's ids, as train and eval read --data.
  Ids file_ids(const Tokenizer& t, const std::string& text) {
    const fs::path file = dir_ / "text.txt";
    std::ofstream(file, std::ios::binary) << text;
    return encode_text_file(t, file.string(), "--data");
  }
  // A copy of tokenizer preset `name` whose preprocessor.json sets `key`.
  std::string with_flag(const std::string& name, const char* key, bool value) {
    const fs::path d = dir_ / name;
    fs::copy(kPresets + name, d, fs::copy_options::recursive);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "preprocessor.json"));
    j["config"][key] = value;
    std::ofstream(d / "preprocessor.json") << j.dump();
    return d.string();
  }
};

// A training text from a preset is packed as KerasHub's CausalLMPreprocessor
// packs it, [start] text [end] (add_start_token, add_end_token); prompts
// (encode) get no end token; a Hugging Face directory's file ids are its
// template's, as before.
TEST_F(KerasHubTrainingText, EndsWithKerasHubsEndToken) {
  const std::string text = "Hello world's end: 12345\n";
  struct Case {
    const char* preset;
    const char* start;
    const char* end;
  };
  for (const Case& c :
       {Case{"llama3", "<|begin_of_text|>", "<|end_of_text|>"},
        Case{"qwen2", nullptr, "<|endoftext|>"}, Case{"gpt2", "<|endoftext|>", "<|endoftext|>"},
        Case{"sentencepiece", "<s>", "</s>"}}) {
    const auto t = keras_hub::load_preset_tokenizer(kPresets + c.preset);
    const auto start = c.start ? t->token_to_id(c.start) : std::nullopt;
    const Ids plain = t->encode(text, false);
    EXPECT_EQ(file_ids(*t, text), with(plain, start, t->token_to_id(c.end))) << c.preset;
    EXPECT_EQ(t->encode(text), with(plain, start)) << c.preset;
    // add_end_token false: no end token; add_start_token false: no start.
    const auto no_end =
        keras_hub::load_preset_tokenizer(with_flag(c.preset, "add_end_token", false));
    EXPECT_EQ(file_ids(*no_end, text), with(plain, start)) << c.preset;
    fs::remove_all(dir_ / c.preset);
    const auto no_start =
        keras_hub::load_preset_tokenizer(with_flag(c.preset, "add_start_token", false));
    EXPECT_EQ(file_ids(*no_start, text), with(plain, std::nullopt, t->token_to_id(c.end)))
        << c.preset;
    fs::remove_all(dir_ / c.preset);
  }
  const auto hf = load_tokenizer(kFiles + "llama3_hub");
  EXPECT_EQ(file_ids(*hf, text), hf->encode(text));
}

// The error of loading a tokenizer preset, "" if none.
std::string load_error(const std::string& dir) {
  try {
    keras_hub::load_preset_tokenizer(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A vocabulary without a special token the class needs, and config fields of
// the wrong type, are one-line errors naming them.
TEST_F(KerasHubTrainingText, MissingSpecialTokensAreNamed) {
  const fs::path d = dir_ / "llama3";
  fs::copy(kPresets + "llama3", d, fs::copy_options::recursive);
  const fs::path vocab = d / "assets" / "tokenizer" / "vocabulary.json";
  nlohmann::json v = nlohmann::json::parse(std::ifstream(vocab));
  v.erase("<|eot_id|>");
  std::ofstream(vocab) << v.dump();
  EXPECT_NE(load_error(d.string()).find("special token '<|eot_id|>' is not in the vocabulary"),
            std::string::npos)
      << load_error(d.string());
  nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "tokenizer.json"));
  j["config"]["unsplittable_tokens"] = "<|end_of_text|>";
  std::ofstream(d / "tokenizer.json") << j.dump();
  EXPECT_NE(load_error(d.string()).find("\"unsplittable_tokens\" must be a list of strings"),
            std::string::npos)
      << load_error(d.string());
}

}  // namespace
}  // namespace autoshard
