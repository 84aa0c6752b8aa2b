// A JSON scanner that drives a SAX handler (nlohmann's events), for the
// IOPDDL reader.
//
// nlohmann's own lexer builds every number as a string and converts it with
// strtoull: on the public problems (60-190 MB of JSON, nearly all integers)
// that was 60% of reading, 4-8 s of a 10 s limit on two loaded cores.
// This scanner reads integers digit by digit straight from the stream
// buffer and hands everything else (floats, strings, literals) over in the
// same events nlohmann would, so the handler's checks stay as they are. It
// accepts exactly the JSON (RFC 8259) nlohmann accepts: a leading UTF-8 byte
// order mark is skipped, strings must be valid UTF-8 without control
// characters, integers that overflow 64 bits become floats, and nothing may
// follow the document but whitespace (tests/problem_reader_test.cc compares
// the two on mutated documents).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <streambuf>
#include <string>

namespace autoshard::json_scan {

// Deeper nesting is refused (the scanner recurses; IOPDDL needs 4 levels).
inline constexpr int kMaxDepth = 10000;
// The longest string or number kept (a name, a float's text): no real
// problem comes near it; a megabyte of digits is a bomb.
inline constexpr std::size_t kMaxTokenBytes = 1 << 20;

// Handler: nlohmann::json_sax's methods (start_object, key, number_unsigned,
// ...), each returning false to stop, syntax_error(byte, what) and
// token_too_long(byte).
template <class Handler>
class Scanner {
 public:
  Scanner(std::streambuf& in, Handler& sax) : in_(in), sax_(sax) {}

  // False when the text is not JSON (the handler's syntax_error is called)
  // or the handler stopped.
  bool document() {
    skip_bom();
    if (!value()) return false;
    skip_space();
    return peek() == kEnd || fail("end of input expected after the document");
  }

 private:
  static constexpr int kEnd = std::streambuf::traits_type::eof();

  int peek() { return in_.sgetc(); }
  int get() {
    ++offset_;
    return in_.sbumpc();
  }
  void skip_space() {
    for (int c = peek(); c == ' ' || c == '\t' || c == '\n' || c == '\r'; c = peek()) get();
  }
  void skip_bom() {
    if (peek() != 0xEF) return;
    get();
    if (get() != 0xBB || get() != 0xBF) offset_ = 0, bom_broken_ = true;
  }

  bool fail(const char* what) {
    sax_.syntax_error(offset_, what);
    return false;
  }

  bool value() {
    if (bom_broken_) return fail("invalid byte order mark");
    if (depth_ >= kMaxDepth) return fail("nested deeper than 10,000 levels");
    skip_space();
    switch (peek()) {
      case '{':
        return container(true);
      case '[':
        return container(false);
      case '"': {
        if (!string(text_)) return false;
        return sax_.string(text_);
      }
      case 't':
        return literal("true") && sax_.boolean(true);
      case 'f':
        return literal("false") && sax_.boolean(false);
      case 'n':
        return literal("null") && sax_.null();
      default:
        return number();
    }
  }

  bool literal(const char* word) {
    for (const char* c = word; *c; ++c)
      if (get() != *c) return fail("invalid literal");
    return true;
  }

  // An object or an array, one level deeper: its events, and each item's
  // key (an object's) and value.
  bool container(bool is_object) {
    ++depth_;
    const bool ok = items(is_object);
    --depth_;
    return ok;
  }

  bool items(bool is_object) {
    const int close = is_object ? '}' : ']';
    get();  // '{' or '['
    if (!(is_object ? sax_.start_object(std::size_t(-1)) : sax_.start_array(std::size_t(-1))))
      return false;
    for (bool first = true;; first = false) {
      skip_space();
      if (first && peek() == close) {  // empty; no trailing ',' allowed after an item
        get();
        break;
      }
      if ((is_object && !key()) || !value()) return false;
      skip_space();
      const int c = get();
      if (c == close) break;
      if (c != ',') return fail(is_object ? "',' or '}' expected" : "',' or ']' expected");
    }
    return is_object ? sax_.end_object() : sax_.end_array();
  }

  bool key() {
    if (peek() != '"') return fail("object key expected");
    if (!string(text_) || !sax_.key(text_)) return false;
    skip_space();
    return get() == ':' || fail("':' expected");
  }

  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?: integers that fit go to
  // the handler as such, with no text kept; everything else as a double
  // with its text.
  bool number() {
    const bool negative = peek() == '-';
    if (negative) get();
    if (!is_digit(peek())) return fail("invalid number");
    uint64_t magnitude = 0;
    bool text = false;  // number_ holds the text (past 64 bits)
    const bool zero = peek() == '0';
    while (is_digit(peek())) {
      const int d = get() - '0';
      if (!text && magnitude > (UINT64_MAX - d) / 10) {
        start_text(negative, magnitude);
        text = true;
      }
      if (text) {
        number_.push_back(char('0' + d));
        if (number_.size() > kMaxTokenBytes) return too_long();
      } else {
        magnitude = magnitude * 10 + uint64_t(d);
      }
      if (zero) break;  // "0" ends the integer part: "01" is not JSON
    }
    const bool real = peek() == '.' || peek() == 'e' || peek() == 'E';
    if (!real && !text) {
      if (!negative) return sax_.number_unsigned(magnitude);
      if (magnitude <= uint64_t{1} << 63)
        return sax_.number_integer(
            magnitude == uint64_t{1} << 63 ? INT64_MIN : -static_cast<int64_t>(magnitude));
    }
    if (!text) start_text(negative, magnitude);
    if (peek() == '.') {
      number_.push_back(char(get()));
      if (!digits()) return false;
    }
    if (peek() == 'e' || peek() == 'E') {
      number_.push_back(char(get()));
      if (peek() == '+' || peek() == '-') number_.push_back(char(get()));
      if (!digits()) return false;
    }
    const double v = std::strtod(number_.c_str(), nullptr);
    if (!std::isfinite(v)) return fail("number overflow");  // as nlohmann: 1e400 is not JSON's
    return sax_.number_float(v, number_);
  }
  // The text of the digits read so far, a float's or a long integer's.
  void start_text(bool negative, uint64_t magnitude) {
    number_.assign(negative ? 1 : 0, '-');
    number_ += std::to_string(magnitude);
  }
  bool too_long() {
    sax_.token_too_long(offset_);
    return false;
  }
  static bool is_digit(int c) { return c >= '0' && c <= '9'; }
  bool digits() {
    if (!is_digit(peek())) return fail("invalid number");
    while (is_digit(peek())) {
      number_.push_back(char(get()));
      if (number_.size() > kMaxTokenBytes) return too_long();
    }
    return true;
  }

  // A string's contents, escapes decoded, into `out`; its bytes must be
  // valid UTF-8 without control characters.
  bool string(std::string& out) {
    out.clear();
    get();  // '"'
    while (true) {
      const int c = get();
      if (c == kEnd) return fail("unterminated string");
      if (c == '"') return true;
      if (c < 0x20) return fail("control character in a string");
      if (out.size() >= kMaxTokenBytes) return too_long();
      if (c == '\\') {
        if (!escape(out)) return false;
      } else if (c < 0x80) {
        out.push_back(char(c));
      } else if (!utf8(c, out)) {
        return fail("invalid UTF-8 in a string");
      }
    }
  }

  bool escape(std::string& out) {
    const int c = get();
    if (c == 'u') return unicode(out);
    // The one-character escapes and what each stands for.
    static constexpr char kFrom[] = "\"\\/bfnrt", kTo[] = "\"\\/\b\f\n\r\t";
    for (int i = 0; i < 8; ++i)
      if (c == kFrom[i]) {
        out.push_back(kTo[i]);
        return true;
      }
    return fail("invalid escape in a string");
  }

  int hex4() {
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const int c = get();
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  // \uXXXX, a surrogate pair joined, as UTF-8.
  bool unicode(std::string& out) {
    int code = hex4();
    if (code < 0) return fail("invalid \\u escape");
    if (code >= 0xDC00 && code <= 0xDFFF) return fail("lone low surrogate");
    if (code >= 0xD800 && code <= 0xDBFF) {
      if (get() != '\\' || get() != 'u') return fail("high surrogate without its pair");
      const int low = hex4();
      if (low < 0xDC00 || low > 0xDFFF) return fail("high surrogate without its pair");
      code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
    }
    append_utf8(code, out);
    return true;
  }
  static void append_utf8(int code, std::string& out) {
    if (code < 0x80) {
      out.push_back(char(code));
    } else if (code < 0x800) {
      out.push_back(char(0xC0 | (code >> 6)));
      out.push_back(char(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out.push_back(char(0xE0 | (code >> 12)));
      out.push_back(char(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(char(0x80 | (code & 0x3F)));
    } else {
      out.push_back(char(0xF0 | (code >> 18)));
      out.push_back(char(0x80 | ((code >> 12) & 0x3F)));
      out.push_back(char(0x80 | ((code >> 6) & 0x3F)));
      out.push_back(char(0x80 | (code & 0x3F)));
    }
  }

  // One UTF-8 sequence whose first byte is `lead` (>= 0x80), by the ranges
  // of RFC 3629 (no overlong forms, no surrogates, nothing past U+10FFFF).
  bool utf8(int lead, std::string& out) {
    int count = 0, lo = 0x80, hi = 0xBF;
    if (lead >= 0xC2 && lead <= 0xDF) {
      count = 1;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      count = 2;
      if (lead == 0xE0) lo = 0xA0;
      if (lead == 0xED) hi = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      count = 3;
      if (lead == 0xF0) lo = 0x90;
      if (lead == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    out.push_back(char(lead));
    for (int i = 0; i < count; ++i) {
      const int c = get();
      if (c < lo || c > hi) return false;
      out.push_back(char(c));
      lo = 0x80, hi = 0xBF;
    }
    return true;
  }

  std::streambuf& in_;
  Handler& sax_;
  std::size_t offset_ = 0;
  int depth_ = 0;
  bool bom_broken_ = false;
  std::string text_, number_;
};

}  // namespace autoshard::json_scan
