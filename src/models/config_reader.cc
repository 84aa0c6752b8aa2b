#include "autoshard/models/config_reader.h"

#include <climits>
#include <cmath>
#include <filesystem>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/json.h"

namespace autoshard {

ConfigReader::ConfigReader(const std::string& text, std::string source)
    : source_(std::move(source)) {
  j_ = parse_json_text(text, "model config '" + source_ + "'");
  AS_CHECK(j_.is_object(), "model config '", source_, "' must be a JSON object");
}

ConfigReader ConfigReader::from_file(const std::string& path) {
  AS_CHECK(std::filesystem::exists(path), "cannot open model config '", path, "': no such file");
  // A config.json is a few kilobytes; a larger file is not one.
  return ConfigReader(read_input_file(path, "model config", 16 << 20), path);
}

ConfigReader ConfigReader::nested(const char* key) const {
  if (!has(key)) return ConfigReader(nlohmann::json::object(), source_, prefix_ + key + ".");
  AS_CHECK(j_[key].is_object(), where(key), " must be an object or null, got ", j_[key].dump());
  return ConfigReader(j_[key], source_, prefix_ + key + ".");
}

std::string ConfigReader::where(const char* key) const {
  return cat("model config '", source_, "': \"", prefix_, key, "\"");
}

bool ConfigReader::has(const char* key) const {
  return j_.contains(key) && !j_[key].is_null();
}

std::string ConfigReader::model_type() const {
  std::string type;
  text("model_type", type);
  return type;
}

void ConfigReader::size(const char* key, int64_t& field, bool required) const {
  if (!has(key)) {
    AS_CHECK(!required, "model config '", source_, "' lacks \"", prefix_, key, "\"");
    return;
  }
  const auto& v = j_[key];
  AS_CHECK(v.is_number_integer(), where(key), " must be a whole number, got ", v.dump());
  AS_CHECK(v.is_number_unsigned() && v.get<uint64_t>() >= 1 && v.get<uint64_t>() <= INT32_MAX,
           where(key), " = ", v.dump(), " is out of range (1 to 2147483647)");
  field = v.get<int64_t>();
}

void ConfigReader::real(const char* key, double& field, double lo, double hi, bool lo_open) const {
  if (!has(key)) return;
  const auto& v = j_[key];
  AS_CHECK(v.is_number(), where(key), " must be a number, got ", v.dump());
  const double x = v.get<double>();
  AS_CHECK(std::isfinite(x) && (lo_open ? x > lo : x >= lo) && x < hi, where(key), " = ", v.dump(),
           " is out of range (", lo_open ? "above " : "", lo, " to below ", hi, ")");
  field = x;
}

void ConfigReader::flag(const char* key, bool& field) const {
  if (!has(key)) return;
  AS_CHECK(j_[key].is_boolean(), where(key), " must be true or false, got ", j_[key].dump());
  field = j_[key].get<bool>();
}

void ConfigReader::text(const char* key, std::string& field) const {
  if (!has(key)) return;
  AS_CHECK(j_[key].is_string(), where(key), " must be a string, got ", j_[key].dump());
  field = j_[key].get<std::string>();
}

}  // namespace autoshard
