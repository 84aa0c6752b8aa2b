#include "cli/arguments.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "autoshard/error.h"

namespace autoshard::cli {

int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  AS_CHECK(ec != std::errc::result_out_of_range, flag, " ", text, " is out of range (", lo, " to ",
           hi, ")");
  AS_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), flag, " needs ",
           "an integer, got '", text, "'");
  AS_CHECK(v >= lo && v <= hi, flag, " ", v, " is out of range (", lo, " to ", hi, ")");
  return v;
}

std::vector<int32_t> parse_ids(const std::string& flag, const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');)
    ids.push_back(static_cast<int32_t>(parse_int(flag, item, 0, vocab - 1)));
  AS_CHECK(!ids.empty(), flag, " needs at least one token id, e.g. ", flag, " 1,2,3");
  return ids;
}

uint64_t parse_uint64(const std::string& flag, const std::string& text) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  AS_CHECK(ec != std::errc::result_out_of_range, flag, " ", text,
           " is out of range (0 to 18446744073709551615)");
  AS_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(), flag,
           " needs a non-negative integer, got '", text, "'");
  return v;
}

double parse_real(const std::string& flag, const std::string& text, double lo, double hi,
                  bool lo_open) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  AS_CHECK(!text.empty() && end == text.c_str() + text.size(), flag, " needs a number, got '", text,
           "'");
  AS_CHECK(std::isfinite(v) && errno != ERANGE, flag, " must be a finite number, got '", text, "'");
  AS_CHECK((lo_open ? v > lo : v >= lo) && v <= hi, flag, " ", text, " is out of range (",
           lo_open ? "above " : "", lo, " to ", hi, ")");
  return v;
}

CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int64_t& target, int64_t lo,
                     int64_t hi, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag,
          [&target, flag, lo, hi](const std::string& v) { target = parse_int(flag, v, lo, hi); },
          help)
      ->default_str(std::to_string(target));
}

CLI::Option* add_int(CLI::App* cmd, const std::string& flag, int& target, int lo, int hi,
                     const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag,
          [&target, flag, lo, hi](const std::string& v) {
            target = static_cast<int>(parse_int(flag, v, lo, hi));
          },
          help)
      ->default_str(std::to_string(target));
}

CLI::Option* add_seed(CLI::App* cmd, const std::string& flag, uint64_t& target,
                      const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag, [&target, flag](const std::string& v) { target = parse_uint64(flag, v); }, help)
      ->default_str(std::to_string(target));
}

double parse_bytes(const std::string& flag, const std::string& text) {
  static const std::pair<const char*, double> units[] = {
      {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
      {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
      {"B", 1}};
  for (const auto& [unit, scale] : units) {
    const std::string u = unit;
    if (text.size() > u.size() && text.compare(text.size() - u.size(), u.size(), u) == 0)
      return scale * parse_real(flag, text.substr(0, text.size() - u.size()), 0, 1e18, true);
  }
  return parse_real(flag, text, 0, 1e21, true);
}

CLI::Option* add_bytes(CLI::App* cmd, const std::string& flag, double& target,
                       const std::string& help) {
  return cmd->add_option_function<std::string>(
      flag, [&target, flag](const std::string& v) { target = parse_bytes(flag, v); }, help);
}

CLI::Option* add_real(CLI::App* cmd, const std::string& flag, double& target, double lo, double hi,
                      bool lo_open, const std::string& help) {
  std::ostringstream def;
  def << target;
  return cmd
      ->add_option_function<std::string>(
          flag,
          [&target, flag, lo, hi, lo_open](const std::string& v) {
            target = parse_real(flag, v, lo, hi, lo_open);
          },
          help)
      ->default_str(def.str());
}

CLI::Option* add_real(CLI::App* cmd, const std::string& flag, std::optional<double>& target,
                      double lo, double hi, bool lo_open, const std::string& help) {
  return cmd->add_option_function<std::string>(
      flag,
      [&target, flag, lo, hi, lo_open](const std::string& v) {
        target = parse_real(flag, v, lo, hi, lo_open);
      },
      help);
}

}  // namespace autoshard::cli
