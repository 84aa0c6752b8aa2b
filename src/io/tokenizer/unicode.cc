#include "io/tokenizer/unicode.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/regex.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utext.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include "autoshard/error.h"

namespace autoshard::tokenizer {
namespace {

// The length of the well-formed UTF-8 sequence at text[i], or 0.
size_t sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(text[k]); };
  const uint8_t b = byte(i);
  if (b < 0x80) return 1;
  size_t n = b >= 0xF0 && b <= 0xF4 ? 4 : b >= 0xE0 ? 3 : b >= 0xC2 && b < 0xE0 ? 2 : 0;
  if (n == 0 || i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k)
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  // Overlong forms, surrogates and code points past U+10FFFF.
  if (n == 3 && ((b == 0xE0 && byte(i + 1) < 0xA0) || (b == 0xED && byte(i + 1) >= 0xA0))) return 0;
  if (n == 4 && ((b == 0xF0 && byte(i + 1) < 0x90) || (b == 0xF4 && byte(i + 1) >= 0x90))) return 0;
  return n;
}

void check(UErrorCode status, const std::string& what) {
  AS_CHECK(U_SUCCESS(status), what, ": ", u_errorName(status));
}

// GPT-2's table: printable Latin-1 bytes stand for themselves; the others
// (controls, space, ...) get the code points from U+0100 on, in byte order.
struct ByteAlphabet {
  std::array<std::string, 256> chars;
  std::array<int, 324> bytes;  // by code point, -1 where none

  ByteAlphabet() {
    bytes.fill(-1);
    int next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      const int c = printable ? b : next++;
      chars[b] = utf8(static_cast<char32_t>(c));
      bytes[c] = b;
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

}  // namespace

std::vector<std::string_view> code_points(std::string_view text) {
  std::vector<std::string_view> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::max<size_t>(sequence_length(text, i), 1);
    out.push_back(text.substr(i, n));
    i += n;
  }
  return out;
}

char32_t code_point_of(std::string_view item) {
  if (item.empty() || sequence_length(item, 0) != item.size()) return 0xFFFD;
  const auto b = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(item[k])); };
  switch (item.size()) {
    case 1:
      return b(0);
    case 2:
      return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3:
      return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

std::string utf8(char32_t c) {
  std::string s;
  if (c < 0x80) {
    s += static_cast<char>(c);
  } else if (c < 0x800) {
    s += static_cast<char>(0xC0 | (c >> 6));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    s += static_cast<char>(0xE0 | (c >> 12));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (c >> 18));
    s += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (c & 0x3F));
  }
  return s;
}

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string replace_invalid_utf8(std::string_view text) {
  std::string out;
  for (std::string_view c : code_points(text)) out += code_point_of(c) == 0xFFFD ? utf8(0xFFFD) : c;
  return out;
}

std::string replace_all(std::string text, const std::string& from, const std::string& to) {
  if (from.empty()) return text;
  size_t at = text.find(from);
  if (at == std::string::npos) return text;
  // Built anew: replacing in place moves the tail once per occurrence.
  std::string out;
  out.reserve(text.size());
  size_t last = 0;
  for (; at != std::string::npos; at = text.find(from, last)) {
    out.append(text, last, at - last);
    out += to;
    last = at + from.size();
  }
  out.append(text, last);
  return out;
}

const std::string& byte_to_char(uint8_t byte) {
  return byte_alphabet().chars[byte];
}

std::optional<uint8_t> char_to_byte(char32_t c) {
  if (c >= byte_alphabet().bytes.size() || byte_alphabet().bytes[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(byte_alphabet().bytes[c]);
}

namespace {

thread_local RegexBudget* current_budget = nullptr;

// Called by ICU every 10,000 backtracking states of a match.
UBool charge_budget(const void* budget, int32_t) {
  auto* ticks_left = static_cast<int64_t*>(const_cast<void*>(budget));
  return --*ticks_left >= 0;
}

[[noreturn]] void fail_match(const std::string& label, const std::string& pattern,
                             UErrorCode status, size_t text_bytes) {
  const std::string what = cat(label, ": the regular expression '", pattern, "' needs too much ");
  if (status == U_REGEX_STOPPED_BY_CALLER)
    fail(what,
         "work on this text (catastrophic backtracking, as of '(a+)+$' on 'aaaa...!'); "
         "simplify the pattern");
  if (status == U_REGEX_STACK_OVERFLOW)
    fail(what, "memory for backtracking on a text of ", text_bytes,
         " bytes; simplify the pattern or give shorter text");
  fail(label, ": matching the regular expression '", pattern, "' failed: ", u_errorName(status));
}

}  // namespace

RegexBudget::RegexBudget(size_t text_bytes)
    : ticks_left_(2000 + static_cast<int64_t>(text_bytes / 50)), outer_(current_budget) {
  current_budget = this;
}

RegexBudget::~RegexBudget() {
  current_budget = outer_;
}

struct Regex::Compiled {
  std::unique_ptr<icu::RegexPattern> pattern;
  std::string source;  // the pattern as written, for errors
  std::string label;
};

Regex::Regex(const std::string& pattern, std::string label)
    : compiled_(std::make_unique<Compiled>()) {
  compiled_->source = pattern;
  compiled_->label = std::move(label);
  UErrorCode status = U_ZERO_ERROR;
  UParseError where{};
  compiled_->pattern.reset(
      icu::RegexPattern::compile(icu::UnicodeString::fromUTF8(pattern), 0, where, status));
  AS_CHECK(U_SUCCESS(status), compiled_->label, ": the regular expression '", pattern,
           "' does not compile (", u_errorName(status), " at offset ", where.offset, ")");
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::optional<RegexBudget> own;  // when no caller set one
  if (!current_budget) own.emplace(text.size());
  // Matching over UTF-8 through a UText keeps the indices in bytes.
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<UText, decltype(&utext_close)> input(
      utext_openUTF8(nullptr, text.data(), static_cast<int64_t>(text.size()), &status),
      &utext_close);
  check(status, "opening text for a regular expression");
  std::unique_ptr<icu::RegexMatcher> matcher(compiled_->pattern->matcher(status));
  check(status, "creating a regex matcher");
  matcher->setMatchCallback(charge_budget, &current_budget->ticks_left_, status);
  check(status, "setting a regex matcher's budget");
  matcher->reset(input.get());
  std::vector<std::pair<size_t, size_t>> out;
  while (matcher->find(status)) {
    const auto begin = static_cast<size_t>(matcher->start64(status));
    const auto end = static_cast<size_t>(matcher->end64(status));
    if (end > begin) out.emplace_back(begin, end);
  }
  if (U_FAILURE(status)) [[unlikely]]
    fail_match(compiled_->label, compiled_->source, status, text.size());
  return out;
}

std::string normalize(std::string_view text, NormalForm form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = form == NormalForm::NFC   ? icu::Normalizer2::getNFCInstance(status)
                              : form == NormalForm::NFD ? icu::Normalizer2::getNFDInstance(status)
                              : form == NormalForm::NFKC
                                  ? icu::Normalizer2::getNFKCInstance(status)
                                  : icu::Normalizer2::getNFKDInstance(status);
  check(status, "loading ICU's normaliser");
  const icu::UnicodeString out = n->normalize(icu::UnicodeString::fromUTF8(icu::StringPiece(
                                                  text.data(), static_cast<int32_t>(text.size()))),
                                              status);
  check(status, "normalising text");
  std::string s;
  out.toUTF8String(s);
  return s;
}

std::string to_lower(std::string_view text) {
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(
      icu::StringPiece(text.data(), static_cast<int32_t>(text.size())));
  u.toLower(icu::Locale::getRoot());
  std::string s;
  u.toUTF8String(s);
  return s;
}

bool is_whitespace(char32_t c) {
  return u_isUWhiteSpace(static_cast<UChar32>(c));
}

bool is_punctuation(char32_t c) {
  return (c < 0x80 && std::ispunct(static_cast<int>(c))) || u_ispunct(static_cast<UChar32>(c));
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const int8_t type = u_charType(static_cast<UChar32>(c));
  return type == U_CONTROL_CHAR || type == U_FORMAT_CHAR;
}

bool is_combining_mark(char32_t c) {
  return u_charType(static_cast<UChar32>(c)) == U_NON_SPACING_MARK;
}

bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

}  // namespace autoshard::tokenizer
