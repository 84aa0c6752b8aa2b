// Reads a Hugging Face config.json field by field, with one-line errors that
// name the file, the field and the range it must lie in.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace autoshard {

class ConfigReader {
 public:
  // Parses `text`; `source` names it in errors.
  ConfigReader(const std::string& text, std::string source);
  static ConfigReader from_file(const std::string& path);
  // The object under `key` (absent or null: an empty one), read with the same
  // checks; its errors name the field as "key.field".
  ConfigReader nested(const char* key) const;

  const nlohmann::json& json() const { return j_; }
  const std::string& source() const { return source_; }
  // "model config 'PATH': \"key\"", the start of an error about a field.
  std::string where(const char* key) const;
  // Present and not null.
  bool has(const char* key) const;
  // model_type, or "" when absent.
  std::string model_type() const;
  // A size: a whole number from 1 to 2^31 - 1 (token ids and BLAS sizes are ints).
  void size(const char* key, int64_t& field, bool required) const;
  // A finite number in (lo or [lo, hi).
  void real(const char* key, double& field, double lo, double hi, bool lo_open) const;
  void flag(const char* key, bool& field) const;
  void text(const char* key, std::string& field) const;

 private:
  ConfigReader(nlohmann::json j, std::string source, std::string prefix)
      : j_(std::move(j)), source_(std::move(source)), prefix_(std::move(prefix)) {}

  nlohmann::json j_;
  std::string source_;
  std::string prefix_;  // "rope_scaling." for a nested object
};

}  // namespace autoshard
