// The fields of a KerasHub config object (config.json's "config",
// task.json's), read by the model families' keras_hub_to_hf: each field read
// once with its type checked, those left unread errors.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "autoshard/error.h"

namespace autoshard::keras_hub {

// The fields of one KerasHub config object: each read once, with its type
// checked; those left unread at the end are errors.
class Fields {
 public:
  Fields(nlohmann::json j, std::string where, std::string owner)
      : j_(std::move(j)), where_(std::move(where)), owner_(std::move(owner)) {
    AS_CHECK(j_.is_object(), where_, ": \"config\" must be an object");
  }
  bool has(const char* key) {
    used_.insert(key);
    return j_.contains(key) && !j_[key].is_null();
  }
  int64_t size(const char* key, std::optional<int64_t> fallback = {}) {
    if (!has(key)) {
      AS_CHECK(fallback, where_, ": \"", key, "\" is missing (", owner_, " needs it)");
      return *fallback;
    }
    const nlohmann::json& v = j_[key];
    AS_CHECK(
        v.is_number_integer() && v.get<int64_t>() >= 1 && v.get<int64_t>() < (int64_t(1) << 31),
        where_, ": \"", key, "\" must be a whole number from 1 to 2^31 - 1, not ", v.dump());
    return v.get<int64_t>();
  }
  double real(const char* key, double fallback) {
    if (!has(key)) return fallback;
    const nlohmann::json& v = j_[key];
    AS_CHECK(v.is_number(), where_, ": \"", key, "\" must be a number, not ", v.dump());
    return v.get<double>();
  }
  std::optional<double> maybe_real(const char* key) {
    if (!has(key)) return std::nullopt;
    return real(key, 0);
  }
  bool flag(const char* key, bool fallback) {
    if (!has(key)) return fallback;
    AS_CHECK(j_[key].is_boolean(), where_, ": \"", key, "\" must be true or false, not ",
             j_[key].dump());
    return j_[key].get<bool>();
  }
  // A field whose only value autoshard runs is `runs` (a number).
  void only(const char* key, double runs, const std::string& why) {
    const double v = real(key, runs);
    AS_CHECK(v == runs, where_, ": \"", key, "\" = ", v, " is not supported: ", why);
  }
  void ignore(const char* key) { used_.insert(key); }
  [[noreturn]] void bad(const char* key, const std::string& why) const {
    fail(where_, ": \"", key, "\" ", why);
  }
  // Every field was read.
  void done() const {
    for (const auto& [key, value] : j_.items())
      AS_CHECK(used_.count(key), where_, ": \"", key, "\" is not supported by autoshard's ", owner_,
               " (its fields: see docs/keras-hub.md); remove it or use a Hugging Face "
               "directory");
  }
  const std::string& where() const { return where_; }

 private:
  nlohmann::json j_;
  std::string where_, owner_;
  std::set<std::string> used_;
};

// Fields every Keras layer config has, which change nothing here.
inline void ignore_layer_fields(Fields& f) {
  for (const char* k : {"name", "trainable", "dtype"}) f.ignore(k);
}

// KerasHub gives no position limit for rotary models; long enough for the
// presets' contexts, and only a bound on sequence lengths here.
constexpr int64_t kRotaryPositions = 8192;

}  // namespace autoshard::keras_hub
