// The "model" object of tokenizer.json: its vocabulary and its kind.
#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"

namespace autoshard::tokenizer {

int64_t id_limit_for(size_t entries) {
  return std::min<int64_t>(2 * static_cast<int64_t>(entries) + 1024, INT32_MAX);
}

void Vocabulary::add(const std::string& token, int64_t id, int64_t id_limit,
                     const std::string& where) {
  AS_CHECK(id >= 0 && id < id_limit, where, ": token '", token, "' has the id ", id,
           ", outside 0 to ", id_limit - 1,
           " (ids count up from 0 over the file's tokens; is the id a typo?)");
  const auto at = static_cast<size_t>(id);
  if (tokens.size() <= at) tokens.resize(at + 1);
  AS_CHECK(tokens[at].empty() || tokens[at] == token, where, ": tokens '", tokens[at], "' and '",
           token, "' both have the id ", id, "; give each token its own id");
  ids[token] = static_cast<int32_t>(id);
  tokens[at] = token;
}

std::optional<int32_t> Vocabulary::find(std::string_view token) const {
  auto it = ids.find(token);
  return it == ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

namespace {

Vocabulary vocabulary_of(const JsonField& j, int64_t id_limit) {
  if (!j.json().is_object()) j.fail_type("an object of token: id");
  Vocabulary v;
  v.ids.reserve(j.size());
  for (const auto& [token, id] : j.members())
    v.add(token, id.integer(0, INT32_MAX), id_limit, id.where());
  return v;
}

// Merges are "left right" strings in older files and [left, right] pairs in
// newer ones.
std::vector<std::pair<std::string, std::string>> merges_of(const JsonField& j) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(j.size());
  for (const JsonField& m : j.elements()) {
    if (m.json().is_array()) {
      const std::vector<JsonField> pair = m.elements();
      if (pair.size() != 2) m.fail_type("a pair [left, right] or a string \"left right\"");
      out.emplace_back(pair[0].string(), pair[1].string());
      continue;
    }
    if (!m.json().is_string()) m.fail_type("a pair [left, right] or a string \"left right\"");
    const std::string s = m.string();
    const size_t space = s.find(' ', 1);
    AS_CHECK(space != std::string::npos, m.where(), ": merge '", s, "' is not two tokens");
    out.emplace_back(s.substr(0, space), s.substr(space + 1));
  }
  return out;
}

// The longest word WordPiece splits; longer ones become the unknown token.
constexpr int64_t kMaxWordChars = INT32_MAX;

}  // namespace

std::unique_ptr<SubwordModel> make_subword_model(const JsonField& j, int64_t id_limit) {
  const std::string type = j.has("type") ? j.type() : (j.has("merges") ? "BPE" : "");
  if (type == "BPE") {
    if (j.has("dropout")) {
      const JsonField dropout = j["dropout"];
      if (!dropout.json().is_number() || dropout.json().get<double>() != 0)
        dropout.fail_type("null (BPE dropout is a training option)");
    }
    BpeOptions o;
    if (j.has("unk_token")) o.unk_token = j["unk_token"].string();
    o.continuing_subword_prefix = j.string_or("continuing_subword_prefix", "");
    o.end_of_word_suffix = j.string_or("end_of_word_suffix", "");
    o.byte_fallback = j.flag_or("byte_fallback", false);
    o.fuse_unk = j.flag_or("fuse_unk", false);
    o.ignore_merges = j.flag_or("ignore_merges", false);
    return make_bpe(vocabulary_of(j["vocab"], id_limit), merges_of(j["merges"]), o, j.where());
  }
  if (type == "WordPiece")
    return make_wordpiece(vocabulary_of(j["vocab"], id_limit), j.string_or("unk_token", "[UNK]"),
                          j.string_or("continuing_subword_prefix", "##"),
                          j.integer_or("max_input_chars_per_word", 100, 1, kMaxWordChars),
                          j.where());
  if (type == "WordLevel")
    return make_word_level(vocabulary_of(j["vocab"], id_limit), j.string_or("unk_token", ""),
                           j.where());
  fail(j.where(), ": model type '", type,
       "' is not supported (supported: BPE, WordPiece, WordLevel; for a SentencePiece Unigram "
       "model use its tokenizer.model)");
}

}  // namespace autoshard::tokenizer
