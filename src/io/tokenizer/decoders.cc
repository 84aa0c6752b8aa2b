// Decoders of tokenizer.json ("decoder"): token strings back to text.
#include "autoshard/error.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard::tokenizer {
namespace {

using Tokens = std::vector<std::string>;

// Byte-level: every character stands for one byte; a token with a character
// outside the alphabet (an added token such as "<|endoftext|>" in other
// scripts) is taken as its own UTF-8.
Tokens byte_level(Tokens tokens) {
  std::string bytes;
  for (const std::string& t : tokens) {
    std::string own;
    bool in_alphabet = true;
    for (std::string_view c : code_points(t)) {
      const auto b = char_to_byte(code_point_of(c));
      if (!b) {
        in_alphabet = false;
        break;
      }
      own += static_cast<char>(*b);
    }
    bytes += in_alphabet ? own : t;
  }
  return {replace_invalid_utf8(bytes)};
}

// "<0x41>" -> 0x41.
std::optional<uint8_t> byte_token(const std::string& t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t.back() != '>') return std::nullopt;
  unsigned value = 0;
  for (char c : t.substr(3, 2)) {
    const int digit = std::isdigit(static_cast<unsigned char>(c)) ? c - '0'
                      : c >= 'A' && c <= 'F'                      ? c - 'A' + 10
                                                                  : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + static_cast<unsigned>(digit);
  }
  return static_cast<uint8_t>(value);
}

// Runs of byte tokens become their UTF-8 text, or one U+FFFD per byte when
// the run is not well-formed.
Tokens byte_fallback(Tokens tokens) {
  Tokens out;
  std::string run;
  size_t run_length = 0;
  const auto flush = [&] {
    if (run_length == 0) return;
    if (is_valid_utf8(run)) {
      out.push_back(run);
    } else {
      for (size_t i = 0; i < run_length; ++i) out.push_back(utf8(0xFFFD));
    }
    run.clear();
    run_length = 0;
  };
  for (std::string& t : tokens) {
    if (auto b = byte_token(t)) {
      run += static_cast<char>(*b);
      ++run_length;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  return out;
}

Decoder metaspace_decoder(const JsonField& j) {
  const std::string marker = metaspace_replacement(j);
  const std::string scheme = metaspace_scheme(j);
  return [=](Tokens tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = replace_all(std::move(tokens[i]), marker, " ");
      if (i == 0 && scheme != "never" && tokens[i].starts_with(' ')) tokens[i].erase(0, 1);
    }
    return tokens;
  };
}

// BERT's clean-up of the spaces WordPiece's decoding leaves before
// punctuation and contractions.
std::string clean_up(std::string s) {
  for (auto [from, to] : {std::pair{" .", "."},
                          {" ?", "?"},
                          {" !", "!"},
                          {" ,", ","},
                          {" ' ", "'"},
                          {" n't", "n't"},
                          {" 'm", "'m"},
                          {" 's", "'s"},
                          {" 've", "'ve"},
                          {" 're", "'re"}})
    s = replace_all(std::move(s), from, to);
  return s;
}

Decoder wordpiece(const JsonField& j) {
  const std::string prefix = j.string_or("prefix", "##");
  const bool cleanup = j.flag_or("cleanup", true);
  return [=](Tokens tokens) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string& t = tokens[i];
      if (i > 0 && t.starts_with(prefix))
        t.erase(0, prefix.size());
      else if (i > 0)
        t = " " + t;
      if (cleanup) t = clean_up(std::move(t));
    }
    return tokens;
  };
}

// Strip: up to `start` leading and `stop` trailing copies of one character.
Decoder strip(const JsonField& j) {
  const std::string content = j["content"].string();
  AS_CHECK(!content.empty(), j["content"].where(), " is empty; give the character to strip");
  // More copies than a token has bytes strip nothing more.
  const auto start = static_cast<size_t>(j.integer_or("start", 0, 0, INT32_MAX));
  const auto stop = static_cast<size_t>(j.integer_or("stop", 0, 0, INT32_MAX));
  return [=](Tokens tokens) {
    for (std::string& t : tokens) {
      for (size_t k = 0; k < start && t.starts_with(content); ++k) t.erase(0, content.size());
      for (size_t k = 0; k < stop && t.ends_with(content); ++k) t.erase(t.size() - content.size());
    }
    return tokens;
  };
}

}  // namespace

Decoder make_decoder(const JsonField& j) {
  if (j.is_null()) return [](Tokens tokens) { return tokens; };
  const std::string type = j.type();
  if (type == "Sequence") {
    std::vector<Decoder> parts;
    for (const JsonField& d : j["decoders"].elements()) parts.push_back(make_decoder(d));
    // Moved, not copied: a copy of nested stages would copy all of them.
    return [parts = std::move(parts)](Tokens tokens) {
      for (const Decoder& d : parts) tokens = d(std::move(tokens));
      return tokens;
    };
  }
  if (type == "ByteLevel") return byte_level;
  if (type == "ByteFallback") return byte_fallback;
  if (type == "Metaspace") return metaspace_decoder(j);
  if (type == "WordPiece") return wordpiece(j);
  if (type == "Strip") return strip(j);
  if (type == "Fuse") {
    return [](Tokens tokens) {
      std::string all;
      for (const std::string& t : tokens) all += t;
      return Tokens{all};
    };
  }
  if (type == "Replace") {
    const JsonField pattern = j["pattern"];
    AS_CHECK(pattern.has("String"), pattern.where(), " must be {\"String\": ...}");
    const std::string from = pattern["String"].string(), to = j["content"].string();
    AS_CHECK(!from.empty(), pattern.where(), ".String is empty; give the text to replace");
    return [=](Tokens tokens) {
      for (std::string& t : tokens) t = replace_all(std::move(t), from, to);
      return tokens;
    };
  }
  if (type == "BPEDecoder") {
    const std::string suffix = j.string_or("suffix", "</w>");
    return [=](Tokens tokens) {
      for (size_t i = 0; i < tokens.size(); ++i)
        tokens[i] = replace_all(std::move(tokens[i]), suffix, i + 1 < tokens.size() ? " " : "");
      return tokens;
    };
  }
  fail(j.where(), ": decoder type '", type,
       "' is not supported (supported: Sequence, ByteLevel, ByteFallback, Metaspace, WordPiece, "
       "Strip, Fuse, Replace, BPEDecoder)");
}

}  // namespace autoshard::tokenizer
