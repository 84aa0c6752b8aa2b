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

Behavior behavior_of(const JsonField& j) {
  const std::string name = j.string();
  if (name == "Removed") return Behavior::Removed;
  if (name == "Isolated") return Behavior::Isolated;
  if (name == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::MergedWithNext;
  if (name == "Contiguous") return Behavior::Contiguous;
  fail(j.where(), ": split behavior '", name,
       "' is not one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous");
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

PreTokenizer byte_level(const JsonField& j) {
  const bool prefix_space = j.flag_or("add_prefix_space", true);
  std::shared_ptr<Regex> regex;
  if (j.flag_or("use_regex", true))
    regex = std::make_shared<Regex>(kGpt2Pattern, "ByteLevel's GPT-2 expression");
  return [=](const std::string& text, bool) {
    const std::string spaced = prefix_space && !text.starts_with(' ') ? " " + text : text;
    std::vector<std::string> pieces =
        regex ? split(spaced, regex->find_all(spaced), Behavior::Isolated)
              : std::vector<std::string>{spaced};
    for (std::string& p : pieces) p = to_byte_alphabet(p);
    return pieces;
  };
}

PreTokenizer split_pre_tokenizer(const JsonField& j) {
  const Behavior behavior = behavior_of(j["behavior"]);
  const bool invert = j.flag_or("invert", false);
  const JsonField pattern = j["pattern"];
  std::function<Ranges(const std::string&)> find;
  if (pattern.has("Regex")) {
    auto regex = std::make_shared<Regex>(pattern["Regex"].string(), pattern["Regex"].where());
    find = [regex](const std::string& text) { return regex->find_all(text); };
  } else {
    AS_CHECK(pattern.has("String"), pattern.where(), " needs \"String\" or \"Regex\"");
    const std::string s = pattern["String"].string();
    AS_CHECK(!s.empty(), pattern.where(), ".String is empty; give the text to split at");
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

}  // namespace

std::string metaspace_replacement(const JsonField& j) {
  if (!j.has("replacement")) return "▁";
  const JsonField r = j["replacement"];
  const std::string marker = r.string();
  if (code_points(marker).size() != 1 || !is_valid_utf8(marker))
    r.fail_type("one character (\"▁\" in most files)");
  return marker;
}

std::string metaspace_scheme(const JsonField& j) {
  // Older files say add_prefix_space: true/false instead of prepend_scheme.
  if (!j.has("prepend_scheme")) return j.flag_or("add_prefix_space", true) ? "always" : "never";
  const JsonField s = j["prepend_scheme"];
  const std::string scheme = s.string();
  if (scheme != "always" && scheme != "first" && scheme != "never")
    s.fail_type("\"always\", \"first\" or \"never\"");
  return scheme;
}

namespace {

PreTokenizer metaspace_pre_tokenizer(const JsonField& j) {
  const std::string marker = metaspace_replacement(j);
  const std::string scheme = metaspace_scheme(j);
  const bool split_pieces = j.flag_or("split", true);
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
  // Moved, not copied: a copy of nested stages would copy all of them.
  return [parts = std::move(parts)](const std::string& text, bool at_start) {
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

PreTokenizer make_pre_tokenizer(const JsonField& j) {
  if (j.is_null())
    return [](const std::string& text, bool) { return std::vector<std::string>{text}; };
  const std::string type = j.type();
  if (type == "Sequence") {
    std::vector<PreTokenizer> parts;
    for (const JsonField& p : j["pretokenizers"].elements()) parts.push_back(make_pre_tokenizer(p));
    return sequence(std::move(parts));
  }
  if (type == "ByteLevel") return byte_level(j);
  if (type == "Split") return split_pre_tokenizer(j);
  if (type == "Metaspace") return metaspace_pre_tokenizer(j);
  if (type == "WhitespaceSplit") return by_chars(is_whitespace, Behavior::Removed);
  if (type == "Punctuation")
    return by_chars(is_punctuation,
                    j.has("behavior") ? behavior_of(j["behavior"]) : Behavior::Isolated);
  if (type == "BertPreTokenizer")
    return sequence(
        {by_chars(is_whitespace, Behavior::Removed), by_chars(is_punctuation, Behavior::Isolated)});
  if (type == "Whitespace") {
    auto regex = std::make_shared<Regex>(R"(\w+|[^\w\s]+)", "the Whitespace pre-tokenizer");
    return [regex](const std::string& text, bool) {
      return split(text, segments_of(text, regex->find_all(text), true), Behavior::Removed);
    };
  }
  if (type == "Digits") {
    const bool each = j.flag_or("individual_digits", false);
    return by_chars([](char32_t c) { return c >= '0' && c <= '9'; },
                    each ? Behavior::Isolated : Behavior::Contiguous);
  }
  fail(j.where(), ": pre_tokenizer type '", type,
       "' is not supported (supported: Sequence, ByteLevel, Split, Metaspace, Whitespace, "
       "WhitespaceSplit, Punctuation, BertPreTokenizer, Digits)");
}

}  // namespace autoshard::tokenizer
