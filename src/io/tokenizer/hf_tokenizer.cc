// A Hugging Face tokenizer: added tokens are cut out of the text first; the
// rest is normalized, pre-tokenized and encoded by the subword model; the
// post-processor adds the template's special tokens. GPT-2's vocab.json +
// merges.txt and BERT's vocab.txt are the same pipeline with fixed stages.
#include <algorithm>
#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "autoshard/io/tokenizer.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard {
namespace tokenizer {
namespace {

// A token of "added_tokens": matched in the raw text before anything else.
struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false;  // the match swallows whitespace on that side
  bool single_word = false;             // only where not inside a word
};

struct Stages {
  Normalizer normalizer = make_normalizer(nullptr, "");
  PreTokenizer pre_tokenizer = make_pre_tokenizer(nullptr, "");
  std::unique_ptr<SubwordModel> model;
  PostProcessor post_processor = make_post_processor(nullptr, "");
  Decoder decoder = make_decoder(nullptr, "");
  std::vector<AddedToken> added;
};

bool is_word_char(std::string_view c) {
  const char32_t cp = code_point_of(c);
  return !is_whitespace(cp) && !is_punctuation(cp);
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(Stages stages) : s_(std::move(stages)) {
    // Longest first, so that "<|end|>" loses to "<|endoftext|>" at one place.
    std::stable_sort(s_.added.begin(), s_.added.end(), [](const auto& a, const auto& b) {
      return a.content.size() > b.content.size();
    });
    for (const AddedToken& t : s_.added) {
      AS_CHECK(!t.content.empty(), "an added token (id ", t.id, ") is empty");
      by_id_[t.id] = &t;
      by_content_[t.content] = t.id;
    }
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int32_t> ids;
    size_t last = 0;  // text[last, at) waits for the subword model
    for (size_t at = 0; at < text.size();) {
      const Match m = added_at(text, at, last);
      if (!m.token) {
        ++at;
        continue;
      }
      encode_plain(text.substr(last, m.begin - last), last == 0, ids);
      ids.push_back(m.token->id);
      at = last = m.end;
    }
    encode_plain(text.substr(last), last == 0, ids);
    return add_special_tokens ? s_.post_processor(std::move(ids)) : ids;
  }

  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override {
    std::vector<std::string> tokens;
    for (int32_t id : ids) {
      auto added = by_id_.find(id);
      if (added != by_id_.end() && added->second->special && skip_special_tokens) continue;
      tokens.push_back(id_to_token(id));
    }
    std::string text;
    for (const std::string& t : s_.decoder(std::move(tokens))) text += t;
    return text;
  }

  int64_t vocab_size() const override {
    int64_t n = static_cast<int64_t>(s_.model->vocabulary().tokens.size());
    for (const AddedToken& t : s_.added) n = std::max<int64_t>(n, t.id + 1);
    return n;
  }

  std::optional<int32_t> token_to_id(std::string_view token) const override {
    auto it = by_content_.find(std::string(token));
    if (it != by_content_.end()) return it->second;
    return s_.model->vocabulary().find(token);
  }

  std::string id_to_token(int32_t id) const override {
    if (auto it = by_id_.find(id); it != by_id_.end()) return it->second->content;
    const auto& tokens = s_.model->vocabulary().tokens;
    AS_CHECK(id >= 0 && static_cast<size_t>(id) < tokens.size() && !tokens[id].empty(), "token id ",
             id, " is not in the tokenizer's vocabulary of ", vocab_size());
    return tokens[static_cast<size_t>(id)];
  }

 private:
  struct Match {
    const AddedToken* token = nullptr;
    size_t begin = 0, end = 0;  // the bytes it replaces, stripped whitespace included
  };

  // The longest added token at text[at] (none where a rule forbids it);
  // lstrip takes back whitespace after `floor`.
  Match added_at(std::string_view text, size_t at, size_t floor) const {
    for (const AddedToken& t : s_.added) {
      if (!text.substr(at).starts_with(t.content)) continue;
      Match m{&t, at, at + t.content.size()};
      if (t.single_word && !standalone(text, m.begin, m.end)) continue;
      while (t.lstrip && m.begin > floor && text[m.begin - 1] == ' ') --m.begin;
      while (t.rstrip && m.end < text.size() && text[m.end] == ' ') ++m.end;
      return m;
    }
    return {};
  }

  static bool standalone(std::string_view text, size_t begin, size_t end) {
    const auto before = code_points(text.substr(0, begin));
    const auto after = code_points(text.substr(end));
    return (before.empty() || !is_word_char(before.back())) &&
           (after.empty() || !is_word_char(after.front()));
  }

  void encode_plain(std::string_view text, bool at_start, std::vector<int32_t>& ids) const {
    if (text.empty()) return;
    const std::string normalized = s_.normalizer(std::string(text));
    for (const std::string& piece : s_.pre_tokenizer(normalized, at_start))
      if (!piece.empty()) s_.model->encode(piece, ids);
  }

  Stages s_;
  std::unordered_map<int32_t, const AddedToken*> by_id_;
  std::unordered_map<std::string, int32_t> by_content_;
};

Json read_json(const std::string& path) {
  std::ifstream in(path);
  AS_CHECK(in, "cannot open ", path);
  try {
    return Json::parse(in);
  } catch (const Json::exception& e) {
    fail(path, " is not valid JSON: ", e.what());
  }
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  AS_CHECK(in, "cannot open ", path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

Stages stages_of(const Json& j, const std::string& where) {
  AS_CHECK(j.is_object() && j.contains("model"), where,
           ": not a Hugging Face tokenizer.json (no \"model\" object)");
  Stages s;
  s.normalizer = make_normalizer(j.value("normalizer", Json()), where);
  s.pre_tokenizer = make_pre_tokenizer(j.value("pre_tokenizer", Json()), where);
  s.model = make_subword_model(j["model"], where);
  s.post_processor = make_post_processor(j.value("post_processor", Json()), where);
  s.decoder = make_decoder(j.value("decoder", Json()), where);
  for (const Json& t : j.value("added_tokens", Json::array()))
    s.added.push_back({t.at("content"), t.at("id"), t.value("special", false),
                       t.value("lstrip", false), t.value("rstrip", false),
                       t.value("single_word", false)});
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> gpt2_tokenizer(const std::string& vocab_json,
                                          const std::string& merges_txt) {
  Stages s;
  Vocabulary vocab;
  const Json entries = read_json(vocab_json);  // kept alive over the loop
  AS_CHECK(entries.is_object(), vocab_json, ": not an object of token: id");
  for (const auto& [token, id] : entries.items()) vocab.add(token, id.get<int32_t>());
  std::vector<std::pair<std::string, std::string>> merges;
  for (const std::string& line : read_lines(merges_txt)) {
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ', 1);
    AS_CHECK(space != std::string::npos, merges_txt, ": line '", line, "' is not two tokens");
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  if (auto eot = vocab.find("<|endoftext|>")) s.added.push_back({"<|endoftext|>", *eot, true});
  s.model = make_bpe(std::move(vocab), merges, {}, merges_txt);
  s.pre_tokenizer =
      make_pre_tokenizer(Json::parse(R"({"type": "ByteLevel", "add_prefix_space": false})"), "");
  s.decoder = make_decoder(Json::parse(R"({"type": "ByteLevel"})"), "");
  return std::make_unique<HfTokenizer>(std::move(s));
}

std::unique_ptr<Tokenizer> bert_tokenizer(const std::string& vocab_txt, bool lowercase) {
  Stages s;
  Vocabulary vocab;
  const std::vector<std::string> lines = read_lines(vocab_txt);
  for (size_t i = 0; i < lines.size(); ++i) vocab.add(lines[i], static_cast<int32_t>(i));
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (auto id = vocab.find(name)) s.added.push_back({name, *id, true});
  const auto cls = vocab.find("[CLS]"), sep = vocab.find("[SEP]");
  AS_CHECK(cls && sep, vocab_txt, ": a BERT vocabulary needs [CLS] and [SEP]");
  s.normalizer = make_normalizer(Json::parse(cat(R"({"type": "BertNormalizer", "lowercase": )",
                                                 lowercase ? "true" : "false", "}")),
                                 "");
  s.pre_tokenizer = make_pre_tokenizer(Json::parse(R"({"type": "BertPreTokenizer"})"), "");
  s.model = make_wordpiece(std::move(vocab), "[UNK]", "##", 100, vocab_txt);
  s.post_processor =
      make_post_processor(Json::parse(cat(R"({"type": "BertProcessing", "cls": ["[CLS]", )", *cls,
                                          R"(], "sep": ["[SEP]", )", *sep, "]}")),
                          "");
  s.decoder = make_decoder(Json::parse(R"({"type": "WordPiece"})"), "");
  return std::make_unique<HfTokenizer>(std::move(s));
}

}  // namespace tokenizer

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json) {
  using namespace tokenizer;
  return std::make_unique<HfTokenizer>(stages_of(read_json(tokenizer_json), tokenizer_json));
}

}  // namespace autoshard
