#include "cli/arguments.h"

#include <algorithm>
#include <charconv>
#include <sstream>

#include "autoshard/error.h"
#include "autoshard/parse.h"

namespace autoshard::cli {

int64_t parse_int(const std::string& flag, const std::string& text, int64_t lo, int64_t hi) {
  return parse_integer(flag, text, lo, hi);
}

std::vector<int32_t> parse_ids(const std::string& flag, const std::string& text, int64_t vocab) {
  AS_CHECK(!text.empty(), flag, " needs at least one token id, e.g. ", flag, " 1,2,3");
  // Every comma separates two ids: "1,2," and "1,,2" are errors, not "1,2".
  std::vector<int32_t> ids;
  for (size_t begin = 0;;) {
    const size_t comma = std::min(text.find(',', begin), text.size());
    const std::string item = text.substr(begin, comma - begin);
    AS_CHECK(!item.empty(), flag, " '", text, "' has an empty id at character ", begin + 1,
             " (ids are separated by single commas, e.g. ", flag, " 1,2,3)");
    ids.push_back(static_cast<int32_t>(parse_int(flag, item, 0, vocab - 1)));
    if (comma == text.size()) return ids;
    begin = comma + 1;
  }
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
  return parse_number(flag, text, lo, hi, lo_open);
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
  return static_cast<double>(parse_byte_size(flag, text));
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
