// The "model" object of tokenizer.json: its vocabulary and its kind.
#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"

namespace autoshard::tokenizer {

void Vocabulary::add(const std::string& token, int32_t id) {
  AS_CHECK(id >= 0, "token '", token, "' has the negative id ", id);
  ids[token] = id;
  if (tokens.size() <= static_cast<size_t>(id)) tokens.resize(static_cast<size_t>(id) + 1);
  tokens[static_cast<size_t>(id)] = token;
}

std::optional<int32_t> Vocabulary::find(std::string_view token) const {
  auto it = ids.find(token);
  return it == ids.end() ? std::nullopt : std::optional<int32_t>(it->second);
}

namespace {

Vocabulary vocabulary_of(const Json& j, const std::string& where) {
  AS_CHECK(j.is_object(), where, ": the model's \"vocab\" is not an object of token: id");
  Vocabulary v;
  for (const auto& [token, id] : j.items()) v.add(token, id.get<int32_t>());
  return v;
}

// Merges are "left right" strings in older files and [left, right] pairs in
// newer ones.
std::vector<std::pair<std::string, std::string>> merges_of(const Json& j,
                                                           const std::string& where) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const Json& m : j) {
    if (m.is_array() && m.size() == 2) {
      out.emplace_back(m[0].get<std::string>(), m[1].get<std::string>());
      continue;
    }
    const std::string s = m.get<std::string>();
    const size_t space = s.find(' ', 1);
    AS_CHECK(space != std::string::npos, where, ": merge '", s, "' is not two tokens");
    out.emplace_back(s.substr(0, space), s.substr(space + 1));
  }
  return out;
}

std::string string_or(const Json& j, const char* key, const std::string& otherwise) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : otherwise;
}

}  // namespace

std::unique_ptr<SubwordModel> make_subword_model(const Json& j, const std::string& where) {
  const std::string type = j.value("type", j.contains("merges") ? "BPE" : "");
  if (type == "BPE") {
    AS_CHECK(!j.contains("dropout") || j["dropout"].is_null() || j["dropout"].get<double>() == 0,
             where, ": BPE dropout is a training option; set \"dropout\": null");
    BpeOptions o;
    if (j.contains("unk_token") && j["unk_token"].is_string()) o.unk_token = j["unk_token"];
    o.continuing_subword_prefix = string_or(j, "continuing_subword_prefix", "");
    o.end_of_word_suffix = string_or(j, "end_of_word_suffix", "");
    o.byte_fallback = j.value("byte_fallback", false);
    o.fuse_unk = j.value("fuse_unk", false);
    o.ignore_merges = j.value("ignore_merges", false);
    return make_bpe(vocabulary_of(j.at("vocab"), where), merges_of(j.at("merges"), where), o,
                    where);
  }
  if (type == "WordPiece")
    return make_wordpiece(vocabulary_of(j.at("vocab"), where), string_or(j, "unk_token", "[UNK]"),
                          string_or(j, "continuing_subword_prefix", "##"),
                          j.value("max_input_chars_per_word", 100), where);
  if (type == "WordLevel")
    return make_word_level(vocabulary_of(j.at("vocab"), where), string_or(j, "unk_token", ""),
                           where);
  fail(where, ": model type '", type,
       "' is not supported (supported: BPE, WordPiece, WordLevel; for a SentencePiece Unigram "
       "model use its tokenizer.model)");
}

}  // namespace autoshard::tokenizer
