// Error: the one exception type autoshard throws for bad input or misuse.
// Messages name the problem and, where there is one, the fix. A message is
// one line of printable text: names that come from files are part of it, so
// their control characters are escaped when an Error is made (one_line).
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace autoshard {

namespace error_detail {

// The length of the valid UTF-8 character at the start of `s` (1 to 4), or
// 0 when it is not one (a stray or overlong byte, a surrogate, a cut end).
inline size_t utf8_length(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char c = b(0);
  size_t n = c < 0x80                 ? 1
             : c >= 0xC2 && c <= 0xDF ? 2
             : c >= 0xE0 && c <= 0xEF ? 3
             : c >= 0xF0 && c <= 0xF4 ? 4
                                      : 0;
  if (n == 0 || n > s.size()) return 0;
  for (size_t i = 1; i < n; ++i)
    if ((b(i) & 0xC0) != 0x80) return 0;
  if (n == 3 && ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) >= 0xA0))) return 0;
  if (n == 4 && ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) >= 0x90))) return 0;
  return n;
}

// Whether the character at the start of `s` (of `n` bytes) moves the cursor
// or the text's direction: C1 controls, the line and paragraph separators,
// and the bidirectional embeddings, overrides and isolates.
inline bool is_invisible_control(std::string_view s, size_t n) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  if (n == 2) return b(0) == 0xC2 && b(1) < 0xA0;  // U+0080..U+009F
  if (n != 3 || b(0) != 0xE2) return false;
  const unsigned cp = ((b(1) & 0x3Fu) << 6) | (b(2) & 0x3Fu);  // low 12 bits of U+2xxx
  return (cp >= 0x028 && cp <= 0x02E) || (cp >= 0x066 && cp <= 0x069);
}

inline void append_hex(std::string& out, unsigned char c) {
  static constexpr char kDigits[] = "0123456789abcdef";
  out += "\\x";
  out += kDigits[c >> 4];
  out += kDigits[c & 15];
}

// `text` with \n, \r, \t and every other control character, invalid UTF-8
// byte and invisible control written as escapes (\x1b, \x00, \xe2\x80\xae).
inline std::string escape_controls(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    const size_t n = utf8_length(text.substr(i));
    if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
    } else if (n == 0 || (n == 1 && (c < 0x20 || c == 0x7F))) {
      append_hex(out, c);
    } else if (is_invisible_control(text.substr(i), n)) {
      for (size_t k = 0; k < n; ++k) append_hex(out, static_cast<unsigned char>(text[i + k]));
    } else {
      out.append(text.substr(i, n));
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

// Back from `at` to the start of a UTF-8 character.
inline size_t char_start(std::string_view s, size_t at) {
  while (at > 0 && at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
  return at;
}

}  // namespace error_detail

// The longest message kept whole, in bytes: longer ones (a name of a
// megabyte in a file) keep their start and end, where the problem and the
// fix are.
constexpr size_t kMaxMessageBytes = 4096;

// `text` as one line of printable text: control characters escaped (see
// escape_controls) and, past kMaxMessageBytes, its middle cut.
inline std::string one_line(std::string_view text) {
  using namespace error_detail;
  if (text.size() <= kMaxMessageBytes) return escape_controls(text);
  const size_t head = char_start(text, kMaxMessageBytes / 2);
  const size_t tail = char_start(text, text.size() - kMaxMessageBytes / 4);
  std::ostringstream out;
  out << escape_controls(text.substr(0, head)) << " [... " << tail - head << " bytes cut ...] "
      << escape_controls(text.substr(tail));
  return out.str();
}

// A name from a file as a message shows it: escaped, and cut after 200
// characters ("..." marks the cut).
inline std::string shown_name(std::string_view name) {
  if (name.size() <= 200) return error_detail::escape_controls(name);
  return error_detail::escape_controls(name.substr(0, error_detail::char_start(name, 200))) + "...";
}

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(one_line(what)) {}
  explicit Error(const char* what) : Error(std::string(what)) {}
};

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

}  // namespace autoshard

// AS_CHECK(condition, message parts...): throws autoshard::Error with the
// parts concatenated when the condition is false. The parts are evaluated
// only then, so a check costs one branch on hot paths and a part may depend
// on the condition (a pointer the condition tests for null, say).
#define AS_CHECK(condition, ...)      \
  do {                                \
    if (!(condition)) [[unlikely]]    \
      ::autoshard::fail(__VA_ARGS__); \
  } while (false)
