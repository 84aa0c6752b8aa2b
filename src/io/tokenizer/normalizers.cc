// Normalizers of tokenizer.json ("normalizer"): text to text before it is
// split. Each is built once from its JSON object.
#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard::tokenizer {
namespace {

std::string strip_accents(const std::string& text) {
  const std::string decomposed = normalize(text, NormalForm::NFD);
  std::string out;
  for (std::string_view c : code_points(decomposed))
    if (!is_combining_mark(code_point_of(c))) out += c;
  return out;
}

// BERT's normalizer: drop control characters, whitespace to spaces, spaces
// around CJK ideographs, optional accent stripping and lowercasing.
Normalizer bert_normalizer(const JsonField& j) {
  const bool clean = j.flag_or("clean_text", true);
  const bool chinese = j.flag_or("handle_chinese_chars", true);
  const bool lowercase = j.flag_or("lowercase", true);
  // strip_accents null follows lowercase, as in BERT's uncased models.
  const bool strip = j.flag_or("strip_accents", lowercase);
  return [=](std::string text) {
    std::string out;
    for (std::string_view item : code_points(text)) {
      const char32_t c = code_point_of(item);
      if (clean && (c == 0 || c == 0xFFFD || is_control(c))) continue;
      if (clean && is_whitespace(c)) {
        out += ' ';
      } else if (chinese && is_cjk(c)) {
        out += ' ';
        out += item;
        out += ' ';
      } else {
        out += item;
      }
    }
    if (strip) out = strip_accents(out);
    return lowercase ? to_lower(out) : out;
  };
}

// Replace's pattern: {"String": s} or {"Regex": r}.
Normalizer replace_normalizer(const JsonField& j) {
  const std::string content = j["content"].string();
  const JsonField pattern = j["pattern"];
  if (pattern.has("String")) {
    const std::string from = pattern["String"].string();
    AS_CHECK(!from.empty(), pattern.where(), ".String is empty; give the text to replace");
    return [=](std::string text) { return replace_all(std::move(text), from, content); };
  }
  AS_CHECK(pattern.has("Regex"), pattern.where(), " needs \"String\" or \"Regex\"");
  auto regex = std::make_shared<Regex>(pattern["Regex"].string(), pattern["Regex"].where());
  return [=](std::string text) {
    std::string out;
    size_t last = 0;
    for (auto [begin, end] : regex->find_all(text)) {
      out.append(text, last, begin - last);
      out += content;
      last = end;
    }
    out.append(text, last);
    return out;
  };
}

Normalizer strip_normalizer(const JsonField& j) {
  const bool left = j.flag_or("strip_left", true), right = j.flag_or("strip_right", true);
  return [=](std::string text) {
    std::vector<std::string_view> cs = code_points(text);
    size_t b = 0, e = cs.size();
    while (left && b < e && is_whitespace(code_point_of(cs[b]))) ++b;
    while (right && e > b && is_whitespace(code_point_of(cs[e - 1]))) --e;
    std::string out;
    for (size_t i = b; i < e; ++i) out += cs[i];
    return out;
  };
}

}  // namespace

Normalizer make_normalizer(const JsonField& j) {
  if (j.is_null()) return [](std::string text) { return text; };
  const std::string type = j.type();
  if (type == "Sequence") {
    std::vector<Normalizer> parts;
    for (const JsonField& n : j["normalizers"].elements()) parts.push_back(make_normalizer(n));
    // Moved, not copied: a copy of nested stages would copy all of them.
    return [parts = std::move(parts)](std::string text) {
      for (const Normalizer& n : parts) text = n(std::move(text));
      return text;
    };
  }
  // A pair, not a structured binding: clang 14 (the fuzzer's) cannot capture one.
  for (const auto& named :
       {std::pair{"NFC", NormalForm::NFC}, std::pair{"NFD", NormalForm::NFD},
        std::pair{"NFKC", NormalForm::NFKC}, std::pair{"NFKD", NormalForm::NFKD}})
    if (type == named.first)
      return [form = named.second](std::string text) { return normalize(text, form); };
  if (type == "Lowercase") return [](std::string text) { return to_lower(text); };
  if (type == "StripAccents") return [](std::string text) { return strip_accents(text); };
  if (type == "BertNormalizer") return bert_normalizer(j);
  if (type == "Replace") return replace_normalizer(j);
  if (type == "Strip") return strip_normalizer(j);
  if (type == "Prepend") {
    const std::string prefix = j["prepend"].string();
    return [prefix](std::string text) { return text.empty() ? text : prefix + text; };
  }
  fail(j.where(), ": normalizer type '", type,
       "' is not supported (supported: Sequence, NFC, NFD, NFKC, NFKD, Lowercase, StripAccents, "
       "BertNormalizer, Replace, Strip, Prepend)");
}

}  // namespace autoshard::tokenizer
