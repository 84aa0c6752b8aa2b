// A KerasHub preset's tokenizer: tokenizer.json names the class and its
// config, assets/tokenizer/ holds the vocabulary (SentencePiece
// vocabulary.spm; byte-level BPE vocabulary.json + merges.txt; WordPiece
// vocabulary.txt), read by the same code as the Hugging Face files. The start
// token KerasHub's CausalLM preprocessors put first (preprocessor.json's
// add_start_token, true by default) is added by encode(text); the end token
// they pack after a training text (add_end_token) by with_training_tokens.
#include "autoshard/io/tokenizer.h"

#include <array>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/json.h"
#include "io/tokenizer/pipeline.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_object(const fs::path& path, const std::string& what) {
  const std::string text = read_input_file(path.string(), what, 64 << 20);
  const json j = parse_json_text(text, what + " '" + path.string() + "'");
  AS_CHECK(j.is_object(), what, " '", path.string(), "' is not a JSON object");
  return j;
}

// The pre-tokenizing expressions of Llama 3's and Qwen2's tokenizer.json
// (their Split pre-tokenizer): case-blind contractions, a letter run with one
// leading non-letter, digits in runs of at most three (Llama 3) or one by one
// (Qwen2), punctuation with its line ends, and whitespace runs.
constexpr const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Kind { SentencePiece, BytePair, WordPiece };

// KerasHub's tokenizer classes (keras_hub/src/models/<family>/*_tokenizer.py):
// the vocabulary's kind, the start and end tokens its CausalLM preprocessor
// packs ("" for none; BERT's template is its own), and for byte-level BPE the
// pre-tokenizing expression (nullptr: GPT-2's) and the special tokens the
// tokenizer keeps whole in the text (its unsplittable_tokens by default).
struct TokenizerClass {
  const char* name;
  Kind kind;
  const char* start;
  const char* end;
  const char* split = nullptr;
  std::array<const char*, 5> special{};
};

const TokenizerClass kClasses[] = {
    {"GemmaTokenizer", Kind::SentencePiece, "<bos>", "<eos>"},
    {"LlamaTokenizer", Kind::SentencePiece, "<s>", "</s>"},
    {"MistralTokenizer", Kind::SentencePiece, "<s>", "</s>"},
    {"GPT2Tokenizer", Kind::BytePair, "<|endoftext|>", "<|endoftext|>", nullptr, {"<|endoftext|>"}},
    {"OPTTokenizer", Kind::BytePair, "</s>", "</s>", nullptr, {"</s>", "<pad>"}},
    {"RobertaTokenizer",
     Kind::BytePair,
     "<s>",
     "</s>",
     nullptr,
     {"<s>", "</s>", "<pad>", "<mask>"}},
    // <|eot_id|> is Llama3Tokenizer's second end token when eos is <|end_of_text|>.
    {"Llama3Tokenizer",
     Kind::BytePair,
     "<|begin_of_text|>",
     "<|end_of_text|>",
     kLlama3Split,
     {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
      "<|eot_id|>"}},
    // QwenTokenizer has no start token: its packer adds none.
    {"QwenTokenizer", Kind::BytePair, "", "<|endoftext|>", kQwen2Split, {"<|endoftext|>"}},
    {"BertTokenizer", Kind::WordPiece, "", ""},
};

// The inner tokenizer without its own start token, and KerasHub's start
// (and, for training text, end) tokens around the text.
class PresetTokenizer : public Tokenizer {
 public:
  PresetTokenizer(std::unique_ptr<Tokenizer> inner, std::optional<int32_t> start,
                  std::optional<int32_t> end)
      : inner_(std::move(inner)), start_(start), end_(end) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids = inner_->encode(text, false);
    return add_special_tokens ? with_special_tokens(std::move(ids)) : ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    return inner_->decode(ids, skip_special_tokens);
  }
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    if (start_) ids.insert(ids.begin(), *start_);
    return ids;
  }
  std::vector<int32_t> with_training_tokens(std::vector<int32_t> ids) const override {
    ids = with_special_tokens(std::move(ids));
    if (end_) ids.push_back(*end_);
    return ids;
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    return inner_->token_to_id(token);
  }
  std::string id_to_token(int32_t id) const override { return inner_->id_to_token(id); }

 private:
  std::unique_ptr<Tokenizer> inner_;
  std::optional<int32_t> start_, end_;
};

// preprocessor.json's config flag `key` (KerasHub's default: true).
bool preprocessor_flag(const fs::path& dir, const char* key) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir / "preprocessor.json", ec))) return true;
  const fs::path path =
      file_in_directory(dir.string(), "preprocessor.json", "KerasHub preprocessor.json");
  const json j = read_json_object(path, "KerasHub preprocessor.json");
  const json config = j.value("config", json::object());
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return true;
  AS_CHECK(config[key].is_boolean(), "KerasHub preprocessor.json '", path.string(), "': \"", key,
           "\" must be true or false");
  return config[key].get<bool>();
}

// A tokenizer asset, inside the preset after symbolic links.
fs::path asset(const fs::path& dir, const char* name) {
  const fs::path p = dir / "assets" / "tokenizer" / name;
  std::error_code ec;
  AS_CHECK(fs::exists(fs::symlink_status(p, ec)), "KerasHub preset '", dir.string(),
           "': its tokenizer needs ", p.string());
  return file_in_directory(dir.string(), cat("assets/tokenizer/", name),
                           "KerasHub tokenizer asset");
}

// The config's string `key`, or `fallback` when it is absent or null
// (Llama3Tokenizer's bos_token and eos_token).
std::string string_or(const json& config, const char* key, const std::string& fallback,
                      const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  AS_CHECK(config[key].is_string(), where, ": \"", key, "\" must be a string");
  return config[key].get<std::string>();
}

// The config's list of strings `key`, if it is there and not null.
std::optional<std::vector<std::string>> strings_of(const json& config, const char* key,
                                                   const std::string& where) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const json& list = config[key];
  AS_CHECK(list.is_array(), where, ": \"", key, "\" must be a list of strings");
  std::vector<std::string> out;
  for (const json& t : list) {
    AS_CHECK(t.is_string(), where, ": \"", key, "\" must be a list of strings, not ", t.dump());
    out.push_back(t.get<std::string>());
  }
  return out;
}

// The byte-level BPE of GPT-2's, OPT's, RoBERTa's, Llama 3's and Qwen's
// classes; `start` and `end` may be renamed by the config (Llama 3's
// bos_token, eos_token). The special tokens kept whole are the config's
// unsplittable_tokens, else the class's (with misc_special_tokens).
std::unique_ptr<Tokenizer> byte_pair(const fs::path& dir, const TokenizerClass& c,
                                     const json& config, const std::string& where,
                                     std::string& start, std::string& end) {
  AS_CHECK(!json_bool_or(config, "add_prefix_space", false, where), where,
           ": \"add_prefix_space\" true is not supported (byte-level BPE without it)");
  const std::string default_end = end;
  start = string_or(config, "bos_token", start, where);
  end = string_or(config, "eos_token", end, where);
  std::vector<std::string> special;
  if (auto listed = strings_of(config, "unsplittable_tokens", where)) {
    special = *listed;
  } else {
    for (const char* t : c.special)
      if (t)
        special.push_back(t == std::string_view(c.start) ? start
                          : t == std::string_view(c.end) ? end
                                                         : t);
    // Llama3Tokenizer keeps <|eot_id|> only beside its default end token.
    if (end != default_end) std::erase(special, std::string("<|eot_id|>"));
    for (const std::string& t :
         strings_of(config, "misc_special_tokens", where).value_or(std::vector<std::string>{}))
      special.push_back(t);
  }
  std::erase(special, std::string());
  return tokenizer::byte_level_bpe_tokenizer(asset(dir, "vocabulary.json").string(),
                                             asset(dir, "merges.txt").string(),
                                             c.split ? c.split : "", special);
}

// The id of `token`, which the class needs (KerasHub refuses a vocabulary
// without its special tokens).
int32_t needed_id(const Tokenizer& t, const std::string& token, const std::string& role,
                  const std::string& where, const std::string& cls) {
  const auto id = t.token_to_id(token);
  AS_CHECK(id, where, ": the vocabulary has no ", role, " token '", token, "' (", cls, ")");
  return *id;
}

}  // namespace

bool has_preset_tokenizer(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "tokenizer.json", ec) &&
         fs::is_directory(fs::path(dir) / "assets" / "tokenizer", ec);
}

namespace {

std::unique_ptr<Tokenizer> read_preset_tokenizer(const std::string& dir) {
  const fs::path d(dir), path = file_in_directory(dir, "tokenizer.json", "KerasHub tokenizer.json");
  const json j = read_json_object(path, "KerasHub tokenizer.json");
  const std::string where = cat("KerasHub tokenizer.json '", path.string(), "'");
  AS_CHECK(j.contains("class_name") && j["class_name"].is_string(), where,
           ": \"class_name\" is missing");
  const std::string cls = j["class_name"].get<std::string>();
  const TokenizerClass* c = nullptr;
  for (const TokenizerClass& k : kClasses)
    if (cls == k.name) c = &k;
  AS_CHECK(c, where, ": \"class_name\" '", cls,
           "' is not read here (GemmaTokenizer, LlamaTokenizer, MistralTokenizer, GPT2Tokenizer, "
           "OPTTokenizer, RobertaTokenizer, Llama3Tokenizer, QwenTokenizer, BertTokenizer); use a "
           "Hugging Face tokenizer.json");
  const json config = j.value("config", json::object());
  AS_CHECK(config.is_object(), where, ": \"config\" must be an object");
  std::string start = c->start, end = c->end;
  std::unique_ptr<Tokenizer> inner;
  switch (c->kind) {
    case Kind::SentencePiece:
      inner = load_sentencepiece_tokenizer(asset(d, "vocabulary.spm").string(), /*add_bos=*/false);
      break;
    case Kind::BytePair:
      inner = byte_pair(d, *c, config, where, start, end);
      break;
    case Kind::WordPiece: {
      const json lower = config.value("lowercase", json(false));
      AS_CHECK(lower.is_boolean(), where, ": \"lowercase\" must be true or false");
      return tokenizer::bert_tokenizer(asset(d, "vocabulary.txt").string(), lower.get<bool>());
    }
  }
  std::optional<int32_t> start_id, end_id;
  if (!start.empty() && preprocessor_flag(d, "add_start_token"))
    start_id = needed_id(*inner, start, "start", where, cls);
  if (!end.empty() && preprocessor_flag(d, "add_end_token"))
    end_id = needed_id(*inner, end, "end", where, cls);
  return std::make_unique<PresetTokenizer>(std::move(inner), start_id, end_id);
}

}  // namespace

std::unique_ptr<Tokenizer> load_preset_tokenizer(const std::string& dir) {
  // The backstop for a JSON value read unchecked: one error naming the file.
  return with_json_errors(
      cat("KerasHub tokenizer.json '", (fs::path(dir) / "tokenizer.json").string(), "'"),
      [&] { return read_preset_tokenizer(dir); });
}

}  // namespace autoshard::keras_hub
