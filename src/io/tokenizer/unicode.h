// Unicode helpers of the tokenizers: UTF-8 code points, GPT-2's byte-level
// alphabet, and ICU's regular expressions, normalisation and character
// classes behind small value types.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace autoshard::tokenizer {

/// The code points of UTF-8 text, each as its bytes (a byte that is not part
/// of a well-formed sequence is one item of its own).
std::vector<std::string_view> code_points(std::string_view text);
// The views would outlive a temporary string.
std::vector<std::string_view> code_points(std::string&& text) = delete;
/// The code point of one item of code_points (U+FFFD for a stray byte).
char32_t code_point_of(std::string_view item);
/// UTF-8 of one code point.
std::string utf8(char32_t c);
/// Whether `text` is well-formed UTF-8.
bool is_valid_utf8(std::string_view text);
/// `text` with each ill-formed byte replaced by U+FFFD.
std::string replace_invalid_utf8(std::string_view text);

/// `text` with every occurrence of `from` replaced by `to`.
std::string replace_all(std::string text, const std::string& from, const std::string& to);

/// GPT-2's byte-level alphabet: each byte as a printable character ("Ġ" for
/// a space), and back.
const std::string& byte_to_char(uint8_t byte);
std::optional<uint8_t> char_to_byte(char32_t c);

/// Bounds the work of the regular expressions run while this object lives
/// on this thread (one text being encoded, through all its stages): a
/// hostile pattern such as "(a+)+$" backtracks exponentially, so matches
/// charge ICU's work to the innermost budget, and a match that overdraws it
/// stops with an error naming the pattern. The allowance grows with the
/// text: real pre-tokenizing expressions need about 12 backtracking states
/// per byte; the budget allows 200 per byte and 20 million to start with
/// (under a second on hostile patterns, plus a few seconds per 256 KiB).
class RegexBudget {
 public:
  explicit RegexBudget(size_t text_bytes);
  ~RegexBudget();
  RegexBudget(const RegexBudget&) = delete;
  RegexBudget& operator=(const RegexBudget&) = delete;

 private:
  friend class Regex;
  int64_t ticks_left_;  // ICU's unit: 10,000 backtracking states
  RegexBudget* outer_;
};

/// A compiled ICU regular expression over UTF-8 text.
class Regex {
 public:
  /// `label` names the pattern's place in errors ("FILE: pre_tokenizer.pattern.Regex").
  Regex(const std::string& pattern, std::string label);
  ~Regex();
  Regex(Regex&&) noexcept;
  /// Byte ranges [begin, end) of the successive non-empty matches, within
  /// the current RegexBudget (or one for `text` alone).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Compiled;
  std::unique_ptr<Compiled> compiled_;
};

enum class NormalForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view text, NormalForm form);
std::string to_lower(std::string_view text);

bool is_whitespace(char32_t c);      // Unicode White_Space
bool is_punctuation(char32_t c);     // ASCII punctuation or a P* category
bool is_control(char32_t c);         // Cc/Cf, but not tab, newline, return
bool is_combining_mark(char32_t c);  // Mn
bool is_cjk(char32_t c);             // the CJK Unified Ideograph blocks

}  // namespace autoshard::tokenizer
