// A Hugging Face tokenizer: added tokens are cut out of the text first; the
// rest is normalized, pre-tokenized and encoded by the subword model; the
// post-processor adds the template's special tokens. GPT-2's vocab.json +
// merges.txt and BERT's vocab.txt are the same pipeline with fixed stages.
#include <algorithm>
#include <array>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/input_file.h"
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
  Normalizer normalizer = make_normalizer(JsonField(nullptr, ""));
  PreTokenizer pre_tokenizer = make_pre_tokenizer(JsonField(nullptr, ""));
  std::unique_ptr<SubwordModel> model;
  PostProcessor post_processor = make_post_processor(JsonField(nullptr, ""), 0);
  Decoder decoder = make_decoder(JsonField(nullptr, ""));
  std::vector<AddedToken> added;  // distinct contents and ids (checked by added_tokens_of)
};

bool is_word_char(std::string_view c) {
  const char32_t cp = code_point_of(c);
  return !is_whitespace(cp) && !is_punctuation(cp);
}

// The code point that ends text[0, end) and the one that starts text[begin,
// ...), as code_points() would cut them, without cutting the whole text.
std::string_view char_before(std::string_view text, size_t end) {
  size_t begin = end - 1;
  while (begin > 0 && end - begin < 4 && (static_cast<uint8_t>(text[begin]) & 0xC0) == 0x80)
    --begin;
  const std::string_view item = text.substr(begin, end - begin);
  return code_points(item).size() == 1 ? item : text.substr(end - 1, 1);
}

std::string_view char_after(std::string_view text, size_t begin) {
  return code_points(text.substr(begin, 4)).front();
}

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(Stages stages) : s_(std::move(stages)) {
    for (const AddedToken& t : s_.added) {
      AS_CHECK(!t.content.empty(), "an added token (id ", t.id, ") is empty");
      by_id_[t.id] = &t;
      by_content_[t.content] = t.id;
      sorted_.push_back(&t);
      starts_[static_cast<uint8_t>(t.content[0])] = true;
    }
    std::sort(sorted_.begin(), sorted_.end(),
              [](const AddedToken* a, const AddedToken* b) { return a->content < b->content; });
  }

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    RegexBudget budget(text.size());
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

  std::vector<int32_t> with_special_tokens(std::vector<int32_t> ids) const override {
    return s_.post_processor(std::move(ids));
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
    if (!starts_[static_cast<uint8_t>(text[at])]) return {};  // the common case
    const std::vector<const AddedToken*> found = added_tokens_at(text, at);
    for (auto it = found.rbegin(); it != found.rend(); ++it) {
      const AddedToken& t = **it;
      Match m{&t, at, at + t.content.size()};
      if (t.single_word && !standalone(text, m.begin, m.end)) continue;
      while (t.lstrip && m.begin > floor && text[m.begin - 1] == ' ') --m.begin;
      while (t.rstrip && m.end < text.size() && text[m.end] == ' ') ++m.end;
      return m;
    }
    return {};
  }

  // The added tokens that text[at, ...) begins with, shortest first: a walk
  // down the sorted contents, where those sharing a prefix form one range
  // (a trie without nodes), so each position costs the longest match's
  // length, not the number of added tokens.
  std::vector<const AddedToken*> added_tokens_at(std::string_view text, size_t at) const {
    std::vector<const AddedToken*> found;
    auto lo = sorted_.begin(), hi = sorted_.end();
    for (size_t depth = 0; lo != hi; ++depth) {
      // All of [lo, hi) begin with text[at, at + depth); one of exactly that
      // length sorts first.
      if ((*lo)->content.size() == depth) found.push_back(*lo++);
      if (at + depth == text.size() || lo == hi) break;
      const auto c = static_cast<uint8_t>(text[at + depth]);
      const auto byte = [depth](const AddedToken* t) {
        return static_cast<uint8_t>(t->content[depth]);
      };
      lo = std::partition_point(lo, hi, [&](const AddedToken* t) { return byte(t) < c; });
      hi = std::partition_point(lo, hi, [&](const AddedToken* t) { return byte(t) == c; });
    }
    return found;
  }

  // Whether text[begin, end) is not inside a word; looks at one character
  // on each side (a scan of the whole prefix would make encoding quadratic).
  static bool standalone(std::string_view text, size_t begin, size_t end) {
    return (begin == 0 || !is_word_char(char_before(text, begin))) &&
           (end == text.size() || !is_word_char(char_after(text, end)));
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
  std::vector<const AddedToken*> sorted_;  // by content, for added_tokens_at
  std::array<bool, 256> starts_{};         // the first bytes of added tokens
};

// The largest tokenizer file read: real ones are below 40 MB; the bound
// keeps a wrong file from filling memory.
constexpr uint64_t kMaxFileBytes = uint64_t{256} << 20;

Json read_json(const std::string& path, const std::string& what) {
  const std::string text = read_input_file(path, what, kMaxFileBytes);
  return parse_json_text(text, path);
}

std::vector<std::string> read_lines(const std::string& path, const std::string& what) {
  const std::string text = read_input_file(path, what, kMaxFileBytes);
  std::vector<std::string> lines;
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(std::move(line));
    at = end + 1;
  }
  return lines;
}

// "added_tokens": each with a content and an id the vocabulary can hold;
// a content or an id given twice must mean one token, and an id the model's
// vocabulary has must be the same token there, or encoding and decoding
// would disagree.
std::vector<AddedToken> added_tokens_of(const JsonField& j, const Vocabulary& vocab,
                                        int64_t id_limit) {
  std::vector<AddedToken> out;
  if (j.is_null()) return out;
  std::unordered_map<std::string, int32_t> by_content;
  std::unordered_map<int32_t, std::string> by_id;
  for (const JsonField& t : j.elements()) {
    AddedToken a{t["content"].string(),       0,
                 t.flag_or("special", false), t.flag_or("lstrip", false),
                 t.flag_or("rstrip", false),  t.flag_or("single_word", false)};
    const int64_t id = t["id"].integer(0, INT32_MAX);
    AS_CHECK(id < id_limit, t.where(), ": added token '", a.content, "' has the id ", id,
             ", outside 0 to ", id_limit - 1, " (ids count up from 0 over the file's tokens)");
    a.id = static_cast<int32_t>(id);
    AS_CHECK(!a.content.empty(), t.where(), ": the added token of id ", id,
             " has an empty content");
    const auto& tokens = vocab.tokens;
    AS_CHECK(a.id >= static_cast<int64_t>(tokens.size()) || tokens[a.id].empty() ||
                 tokens[a.id] == a.content,
             t.where(), ": added token '", a.content, "' has the id ", id,
             " of the model's token '", tokens[a.id], "'; give it its own id");
    const auto [c, new_content] = by_content.emplace(a.content, a.id);
    const auto [i, new_id] = by_id.emplace(a.id, a.content);
    AS_CHECK(c->second == a.id && i->second == a.content, t.where(), ": added token '", a.content,
             "' (id ", id, ") clashes with added token '", i->second, "' (id ", c->second,
             "); give each token one id");
    if (new_content) out.push_back(std::move(a));
  }
  return out;
}

Stages stages_of(const JsonField& j) {
  if (!j.json().is_object() || !j.has("model"))
    fail(j.file(), ": not a Hugging Face tokenizer.json (no \"model\" object)");
  const JsonField model = j["model"];
  const JsonField added = j["added_tokens"];
  // Counted before anything is allocated: ids are bounded by the entries.
  const int64_t id_limit =
      id_limit_for(model["vocab"].size() + (added.json().is_array() ? added.size() : 0));
  Stages s;
  s.model = make_subword_model(model, id_limit);
  s.added = added_tokens_of(added, s.model->vocabulary(), id_limit);
  int64_t vocab_size = static_cast<int64_t>(s.model->vocabulary().tokens.size());
  for (const AddedToken& t : s.added) vocab_size = std::max<int64_t>(vocab_size, t.id + 1);
  s.normalizer = make_normalizer(j["normalizer"]);
  s.pre_tokenizer = make_pre_tokenizer(j["pre_tokenizer"]);
  s.post_processor = make_post_processor(j["post_processor"], vocab_size);
  s.decoder = make_decoder(j["decoder"]);
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> hf_tokenizer_of(const Json& j, const std::string& file) {
  return std::make_unique<HfTokenizer>(stages_of(JsonField(j, file)));
}

namespace {

// The stages of a vocab.json + merges.txt pair: byte-level BPE, its pieces
// cut by `split_pattern` (a Split pre-tokenizer before ByteLevel without its
// own expression) or, when it is empty, by GPT-2's expression.
Stages byte_level_stages(const std::string& vocab_json, const std::string& merges_txt,
                         const std::string& split_pattern) {
  Stages s;
  Vocabulary vocab;
  const Json entries = read_json(vocab_json, "vocab.json");  // kept alive over the loop
  const JsonField root(entries, vocab_json);
  if (!entries.is_object()) root.fail_type("an object of token: id");
  const int64_t id_limit = id_limit_for(entries.size());
  for (const auto& [token, id] : root.members())
    vocab.add(token, id.integer(0, INT32_MAX), id_limit, id.where());
  std::vector<std::pair<std::string, std::string>> merges;
  const std::vector<std::string> lines = read_lines(merges_txt, "merges.txt");
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i];
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ', 1);
    // The line is not quoted: a file that is not a merges list (a wrong
    // path, a secret) must not be shown.
    AS_CHECK(space != std::string::npos, "merges.txt '", merges_txt, "': line ", i + 1,
             " is not two tokens separated by a space; is it a merges file?");
    merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  s.model = make_bpe(std::move(vocab), merges, {}, merges_txt);
  // The stages a tokenizer.json of that kind builds, from the same JSON.
  Json pre = Json::parse(R"({"type": "ByteLevel", "add_prefix_space": false})");
  if (!split_pattern.empty()) {
    pre["use_regex"] = false;
    Json split = {{"type", "Split"}, {"behavior", "Isolated"}, {"invert", false}};
    split["pattern"]["Regex"] = split_pattern;
    pre = Json{{"type", "Sequence"}, {"pretokenizers", Json::array({split, pre})}};
  }
  s.pre_tokenizer = make_pre_tokenizer(JsonField(pre, vocab_json));
  s.decoder = make_decoder(JsonField(Json::parse(R"({"type": "ByteLevel"})"), ""));
  return s;
}

}  // namespace

std::unique_ptr<Tokenizer> byte_level_bpe_tokenizer(const std::string& vocab_json,
                                                    const std::string& merges_txt,
                                                    const std::string& split_pattern,
                                                    const std::vector<std::string>& special) {
  Stages s = byte_level_stages(vocab_json, merges_txt, split_pattern);
  for (const std::string& token : special) {
    const auto id = s.model->vocabulary().find(token);
    AS_CHECK(id, vocab_json, ": the special token '", token,
             "' is not in the vocabulary; add it with its id");
    if (std::none_of(s.added.begin(), s.added.end(),
                     [&](const AddedToken& t) { return t.content == token; }))
      s.added.push_back({token, *id, true});
  }
  return std::make_unique<HfTokenizer>(std::move(s));
}

std::unique_ptr<Tokenizer> gpt2_tokenizer(const std::string& vocab_json,
                                          const std::string& merges_txt) {
  Stages s = byte_level_stages(vocab_json, merges_txt, "");
  // <|endoftext|> is matched whole where the vocabulary has it.
  if (auto eot = s.model->vocabulary().find("<|endoftext|>"))
    s.added.push_back({"<|endoftext|>", *eot, true});
  return std::make_unique<HfTokenizer>(std::move(s));
}

std::unique_ptr<Tokenizer> bert_tokenizer(const std::string& vocab_txt, bool lowercase) {
  Stages s;
  Vocabulary vocab;
  const std::vector<std::string> lines = read_lines(vocab_txt, "vocab.txt");
  const int64_t id_limit = id_limit_for(lines.size());
  for (size_t i = 0; i < lines.size(); ++i)
    vocab.add(lines[i], static_cast<int64_t>(i), id_limit, cat(vocab_txt, ": line ", i + 1));
  for (const char* name : {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"})
    if (auto id = vocab.find(name)) s.added.push_back({name, *id, true});
  const auto cls = vocab.find("[CLS]"), sep = vocab.find("[SEP]");
  AS_CHECK(cls && sep, vocab_txt, ": a BERT vocabulary needs [CLS] and [SEP]");
  const auto vocab_size = static_cast<int64_t>(vocab.tokens.size());
  s.normalizer =
      make_normalizer(JsonField(Json::parse(cat(R"({"type": "BertNormalizer", "lowercase": )",
                                                lowercase ? "true" : "false", "}")),
                                ""));
  s.pre_tokenizer =
      make_pre_tokenizer(JsonField(Json::parse(R"({"type": "BertPreTokenizer"})"), ""));
  s.model = make_wordpiece(std::move(vocab), "[UNK]", "##", 100, vocab_txt);
  s.post_processor = make_post_processor(
      JsonField(Json::parse(cat(R"({"type": "BertProcessing", "cls": ["[CLS]", )", *cls,
                                R"(], "sep": ["[SEP]", )", *sep, "]}")),
                ""),
      vocab_size);
  s.decoder = make_decoder(JsonField(Json::parse(R"({"type": "WordPiece"})"), ""));
  return std::make_unique<HfTokenizer>(std::move(s));
}

}  // namespace tokenizer

std::unique_ptr<Tokenizer> load_hf_tokenizer(const std::string& tokenizer_json) {
  return tokenizer::hf_tokenizer_of(tokenizer::read_json(tokenizer_json, "tokenizer.json"),
                                    tokenizer_json);
}

}  // namespace autoshard
