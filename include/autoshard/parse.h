// Numbers a user types (flags, environment variables), parsed strictly and
// the same way everywhere: decimal only, the whole text (no trailing junk,
// no whitespace, no '+', no hex), no NaN or infinity, and checked against a
// range, never clamped or wrapped. Errors name `what` (the flag or variable)
// and what it takes. Below every layer, like error.h.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

#include "autoshard/error.h"

namespace autoshard {

// An integer in [lo, hi].
inline int64_t parse_integer(const std::string& what, std::string_view text, int64_t lo,
                             int64_t hi) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  AS_CHECK(ec != std::errc::result_out_of_range, what, " ", text, " is out of range (", lo, " to ",
           hi, ")");
  AS_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), what,
           " needs an integer, got '", text, "'");
  AS_CHECK(v >= lo && v <= hi, what, " ", v, " is out of range (", lo, " to ", hi, ")");
  return v;
}

// A finite real in [lo, hi] (lo_open: excluding lo), in decimal or
// scientific notation ("0.5", "6e-4").
inline double parse_number(const std::string& what, std::string_view text, double lo, double hi,
                           bool lo_open = false) {
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  AS_CHECK(ec != std::errc::invalid_argument && end == text.data() + text.size() && !text.empty(),
           what, " needs a number, got '", text, "'");
  AS_CHECK(ec == std::errc() && std::isfinite(v), what, " must be a finite number, got '", text,
           "'");
  AS_CHECK((lo_open ? v > lo : v >= lo) && v <= hi, what, " ", text, " is out of range (",
           lo_open ? "above " : "", lo, " to ", hi, ")");
  return v;
}

// The largest size parse_byte_size accepts: 4 EiB.
constexpr int64_t kMaxByteSize = int64_t{1} << 62;

// A size in whole bytes, from 1 to 4 EiB: a number with an optional unit
// (B; KB, MB, GB, TB in powers of 1000; KiB, MiB, GiB, TiB, and K, M, G, T,
// in powers of 1024), e.g. "16GiB", "1.5GB", "4096". A fraction of a byte
// ("0.5B", "0.3KiB") is an error, not a rounding.
inline int64_t parse_byte_size(const std::string& what, std::string_view text) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},   {"T", 1099511627776.0},
      {"B", 1}};
  std::string_view number = text;
  double scale = 1;
  for (const auto& [unit, factor] : kUnits)
    if (text.size() > unit.size() && text.ends_with(unit)) {
      number = text.substr(0, text.size() - unit.size());
      scale = factor;
      break;
    }
  double v = 0;
  const auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), v);
  AS_CHECK(
      ec != std::errc::invalid_argument && end == number.data() + number.size() && !number.empty(),
      what, " needs a size such as 16GiB, 512MB or 4096 (bytes), got '", text, "'");
  const double bytes = v * scale;
  AS_CHECK(ec == std::errc() && std::isfinite(bytes) && bytes >= 1 && bytes <= double(kMaxByteSize),
           what, " ", text, " is out of range (1 byte to 4 EiB)");
  const double whole = std::round(bytes);
  AS_CHECK(std::abs(bytes - whole) <= 1e-9 * bytes, what, " ", text,
           " is not a whole number of bytes (", bytes, ")");
  return static_cast<int64_t>(whole);
}

}  // namespace autoshard
