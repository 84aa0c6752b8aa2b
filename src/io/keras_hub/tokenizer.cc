// A KerasHub preset's tokenizer: tokenizer.json names the class and its
// config, assets/tokenizer/ holds the vocabulary (SentencePiece
// vocabulary.spm; byte-level BPE vocabulary.json + merges.txt; WordPiece
// vocabulary.txt), read by the same code as the Hugging Face files. The start
// token KerasHub's preprocessors add (preprocessor.json's add_start_token,
// true by default) is added by encode(text) here.
#include "autoshard/io/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "io/tokenizer/pipeline.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path, const std::string& what) {
  const std::string text = read_input_file(path.string(), what, 64 << 20);
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  AS_CHECK(j.is_object(), what, " '", path.string(), "' is not a JSON object");
  return j;
}

// KerasHub's tokenizer classes: the vocabulary's kind and the start token.
struct TokenizerClass {
  const char* name;
  const char* kind;   // "spm", "bpe" or "wordpiece"
  const char* start;  // the start token its CausalLM preprocessor adds ("" for BERT's template)
};

constexpr TokenizerClass kClasses[] = {
    {"GemmaTokenizer", "spm", "<bos>"}, {"LlamaTokenizer", "spm", "<s>"},
    {"MistralTokenizer", "spm", "<s>"}, {"GPT2Tokenizer", "bpe", "<|endoftext|>"},
    {"OPTTokenizer", "bpe", "</s>"},    {"RobertaTokenizer", "bpe", "<s>"},
    {"BertTokenizer", "wordpiece", ""},
};

// The inner tokenizer without its own start token, and KerasHub's added in
// front when special tokens are asked for.
class PresetTokenizer : public Tokenizer {
 public:
  PresetTokenizer(std::unique_ptr<Tokenizer> inner, std::optional<int32_t> start)
      : inner_(std::move(inner)), start_(start) {}
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids = inner_->encode(text, false);
    return add_special_tokens ? with_special_tokens(std::move(ids)) : ids;
  }
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    return inner_->decode(ids, skip_special_tokens);
  }
  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    if (!start_) return inner_->with_special_tokens(std::move(ids));
    ids.insert(ids.begin(), *start_);
    return ids;
  }
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  std::optional<int32_t> token_to_id(std::string_view token) const override {
    return inner_->token_to_id(token);
  }
  std::string id_to_token(int32_t id) const override { return inner_->id_to_token(id); }

 private:
  std::unique_ptr<Tokenizer> inner_;
  std::optional<int32_t> start_;
};

// preprocessor.json's config flag `key` (KerasHub's default: true).
bool preprocessor_flag(const fs::path& dir, const char* key) {
  const fs::path path = dir / "preprocessor.json";
  if (!fs::exists(path)) return true;
  const json j = read_json(path, "KerasHub preprocessor.json");
  const json config = j.value("config", json::object());
  if (!config.is_object() || !config.contains(key) || config[key].is_null()) return true;
  AS_CHECK(config[key].is_boolean(), "KerasHub preprocessor.json '", path.string(), "': \"", key,
           "\" must be true or false");
  return config[key].get<bool>();
}

fs::path asset(const fs::path& dir, const char* name) {
  const fs::path p = dir / "assets" / "tokenizer" / name;
  AS_CHECK(fs::exists(p), "KerasHub preset '", dir.string(), "': its tokenizer needs ", p.string());
  return p;
}

}  // namespace

bool has_preset_tokenizer(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "tokenizer.json", ec) &&
         fs::is_directory(fs::path(dir) / "assets" / "tokenizer", ec);
}

std::unique_ptr<Tokenizer> load_preset_tokenizer(const std::string& dir) {
  const fs::path d(dir), path = d / "tokenizer.json";
  const json j = read_json(path, "KerasHub tokenizer.json");
  const std::string where = cat("KerasHub tokenizer.json '", path.string(), "'");
  AS_CHECK(j.contains("class_name") && j["class_name"].is_string(), where,
           ": \"class_name\" is missing");
  const std::string cls = j["class_name"].get<std::string>();
  const TokenizerClass* c = nullptr;
  for (const TokenizerClass& k : kClasses)
    if (cls == k.name) c = &k;
  AS_CHECK(c, where, ": \"class_name\" '", cls,
           "' is not read here (GemmaTokenizer, LlamaTokenizer, MistralTokenizer, GPT2Tokenizer, "
           "OPTTokenizer, RobertaTokenizer, BertTokenizer); use a Hugging Face tokenizer.json");
  const json config = j.value("config", json::object());
  std::unique_ptr<Tokenizer> inner;
  const std::string kind = c->kind;
  if (kind == "spm") {
    inner = load_sentencepiece_tokenizer(asset(d, "vocabulary.spm").string(), /*add_bos=*/false);
  } else if (kind == "bpe") {
    AS_CHECK(!config.value("add_prefix_space", false), where,
             ": \"add_prefix_space\" true is not supported (GPT-2's byte-level BPE without it)");
    inner = tokenizer::gpt2_tokenizer(asset(d, "vocabulary.json").string(),
                                      asset(d, "merges.txt").string());
  } else {
    const json lower = config.value("lowercase", json(false));
    AS_CHECK(lower.is_boolean(), where, ": \"lowercase\" must be true or false");
    return tokenizer::bert_tokenizer(asset(d, "vocabulary.txt").string(), lower.get<bool>());
  }
  std::optional<int32_t> start;
  if (preprocessor_flag(d, "add_start_token")) {
    start = inner->token_to_id(c->start);
    AS_CHECK(start, where, ": the vocabulary has no start token '", c->start, "' (", cls, ")");
  }
  return std::make_unique<PresetTokenizer>(std::move(inner), start);
}

}  // namespace autoshard::keras_hub
