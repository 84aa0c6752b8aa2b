// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): split normalized text
// into the pieces the subword model sees.
#include <functional>
#include <memory>

#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard::tokenizer {
namespace {

using Ranges = std::vector<std::pair<size_t, size_t>>;

// GPT-2's pre-tokenizing expression (ByteLevel with use_regex): contractions,
// letters, digits and other symbols each with one optional leading space,
// and whitespace not followed by a non-space.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior behavior_of(const std::string& name, const std::string& where) {
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  fail(where, ": split behavior '", name, "' is not one of Removed, Isolated, MergedWithPrevious, ",
       "MergedWithNext, Contiguous");
}

// A text cut into pieces that a pattern matched or not, in order.
struct Segment {
  size_t begin, end;
  bool match;
};

// The segments of `text` for the `matches` (sorted, disjoint byte ranges);
// with `invert`, the matches are what is kept and the gaps the delimiters.
std::vector<Segment> segments_of(const std::string& text, const Ranges& matches,
                                 bool invert = false) {
  std::vector<Segment> out;
  size_t last = 0;
  for (auto [b, e] : matches) {
    if (b > last) out.push_back({last, b, invert});
    out.push_back({b, e, !invert});
    last = e;
  }
  if (last < text.size()) out.push_back({last, text.size(), invert});
  return out;
}

// The pieces of `text` when its matched segments are delimiters of `behavior`.
std::vector<std::string> split(const std::string& text, const std::vector<Segment>& segments,
                               Behavior behavior) {
  std::vector<std::string> out;
  bool glue_next = false;     // MergedWithNext: the last piece waits for the next
  bool last_matched = false;  // Contiguous: consecutive matches form one piece
  for (const Segment& s : segments) {
    const std::string piece = text.substr(s.begin, s.end - s.begin);
    if (s.match && behavior == Behavior::Removed) continue;
    const bool glue = glue_next ||
                      (s.match && behavior == Behavior::MergedWithPrevious && !out.empty()) ||
                      (s.match && behavior == Behavior::Contiguous && last_matched);
    if (glue)
      out.back() += piece;
    else
      out.push_back(piece);
    glue_next = s.match && behavior == Behavior::MergedWithNext;
    last_matched = s.match;
  }
  return out;
}

std::vector<std::string> split(const std::string& text, const Ranges& matches, Behavior behavior) {
  return split(text, segments_of(text, matches), behavior);
}

// Each code point for which `is_delimiter` holds, as a range.
Ranges char_matches(const std::string& text, const std::function<bool(char32_t)>& is_delimiter) {
  Ranges out;
  size_t at = 0;
  for (std::string_view c : code_points(text)) {
    if (is_delimiter(code_point_of(c))) out.emplace_back(at, at + c.size());
    at += c.size();
  }
  return out;
}

std::string to_byte_alphabet(const std::string& piece) {
  std::string out;
  for (char c : piece) out += byte_to_char(static_cast<uint8_t>(c));
  return out;
}

PreTokenizer byte_level(const Json& j) {
  const bool prefix_space = j.value("add_prefix_space", true);
  std::shared_ptr<Regex> regex;
  if (j.value("use_regex", true)) regex = std::make_shared<Regex>(kGpt2Pattern);
  return [=](const std::string& text, bool) {
    const std::string spaced = prefix_space && !text.starts_with(' ') ? " " + text : text;
    std::vector<std::string> pieces =
        regex ? split(spaced, regex->find_all(spaced), Behavior::Isolated)
              : std::vector<std::string>{spaced};
    for (std::string& p : pieces) p = to_byte_alphabet(p);
    return pieces;
  };
}

PreTokenizer split_pre_tokenizer(const Json& j, const std::string& where) {
  const Behavior behavior = behavior_of(j.at("behavior"), where);
  const bool invert = j.value("invert", false);
  const Json& pattern = j.at("pattern");
  std::function<Ranges(const std::string&)> find;
  if (pattern.contains("Regex")) {
    auto regex = std::make_shared<Regex>(pattern["Regex"].get<std::string>());
    find = [regex](const std::string& text) { return regex->find_all(text); };
  } else {
    AS_CHECK(pattern.contains("String"), where, ": a Split pattern needs \"String\" or \"Regex\"");
    const std::string s = pattern["String"];
    AS_CHECK(!s.empty(), where, ": a Split pattern's string is empty");
    find = [s](const std::string& text) {
      Ranges out;
      for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + s.size()))
        out.emplace_back(at, at + s.size());
      return out;
    };
  }
  return [=](const std::string& text, bool) {
    return split(text, segments_of(text, find(text), invert), behavior);
  };
}

PreTokenizer metaspace(const Json& j, const std::string& where) {
  const std::string marker = j.value("replacement", "▁");
  // Older files say add_prefix_space: true/false instead of prepend_scheme.
  const std::string scheme = j.contains("prepend_scheme")
                                 ? j["prepend_scheme"].get<std::string>()
                                 : (j.value("add_prefix_space", true) ? "always" : "never");
  AS_CHECK(scheme == "always" || scheme == "first" || scheme == "never", where,
           ": Metaspace prepend_scheme '", scheme, "' is not always, first or never");
  const bool split_pieces = j.value("split", true);
  return [=](const std::string& text, bool at_start) {
    std::string s;
    for (char c : text) s += c == ' ' ? marker : std::string(1, c);
    if ((scheme == "always" || (scheme == "first" && at_start)) && !s.starts_with(marker))
      s = marker + s;
    if (!split_pieces) return std::vector<std::string>{s};
    Ranges m;
    for (size_t at = s.find(marker); at != std::string::npos; at = s.find(marker, at + 1))
      m.emplace_back(at, at + marker.size());
    return split(s, m, Behavior::MergedWithNext);
  };
}

PreTokenizer by_chars(std::function<bool(char32_t)> is_delimiter, Behavior behavior) {
  return [=](const std::string& text, bool) {
    return split(text, char_matches(text, is_delimiter), behavior);
  };
}

PreTokenizer sequence(std::vector<PreTokenizer> parts) {
  return [parts](const std::string& text, bool at_start) {
    std::vector<std::string> pieces{text};
    for (const PreTokenizer& p : parts) {
      std::vector<std::string> next;
      for (size_t i = 0; i < pieces.size(); ++i)
        for (std::string& q : p(pieces[i], at_start && i == 0)) next.push_back(std::move(q));
      pieces = std::move(next);
    }
    return pieces;
  };
}

}  // namespace

PreTokenizer make_pre_tokenizer(const Json& j, const std::string& where) {
  if (j.is_null())
    return [](const std::string& text, bool) { return std::vector<std::string>{text}; };
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    std::vector<PreTokenizer> parts;
    for (const Json& p : j.at("pretokenizers")) parts.push_back(make_pre_tokenizer(p, where));
    return sequence(std::move(parts));
  }
  if (type == "ByteLevel") return byte_level(j);
  if (type == "Split") return split_pre_tokenizer(j, where);
  if (type == "Metaspace") return metaspace(j, where);
  if (type == "WhitespaceSplit") return by_chars(is_whitespace, Behavior::Removed);
  if (type == "Punctuation")
    return by_chars(is_punctuation, behavior_of(j.value("behavior", "Isolated"), where));
  if (type == "BertPreTokenizer")
    return sequence(
        {by_chars(is_whitespace, Behavior::Removed), by_chars(is_punctuation, Behavior::Isolated)});
  if (type == "Whitespace") {
    auto regex = std::make_shared<Regex>(R"(\w+|[^\w\s]+)");
    return [regex](const std::string& text, bool) {
      return split(text, segments_of(text, regex->find_all(text), true), Behavior::Removed);
    };
  }
  if (type == "Digits") {
    const bool each = j.value("individual_digits", false);
    return by_chars([](char32_t c) { return c >= '0' && c <= '9'; },
                    each ? Behavior::Isolated : Behavior::Contiguous);
  }
  fail(where, ": pre_tokenizer type '", type,
       "' is not supported (supported: Sequence, ByteLevel, Split, Metaspace, Whitespace, "
       "WhitespaceSplit, Punctuation, BertPreTokenizer, Digits)");
}

}  // namespace autoshard::tokenizer
