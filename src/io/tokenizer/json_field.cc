#include "io/tokenizer/json_field.h"

#include <cctype>

#include "autoshard/error.h"

namespace autoshard::tokenizer {
namespace {

const Json& null_value() {
  static const Json null;
  return null;
}

// A value as an error message shows it: its kind, and short values whole.
std::string describe(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string: {
      const std::string s = j.get<std::string>();
      return s.size() <= 40 ? "the string " + j.dump() : "a string of " + std::to_string(s.size());
    }
    case Json::value_t::boolean:
      return j.get<bool>() ? "true" : "false";
    default:
      return "the number " + j.dump();
  }
}

}  // namespace

std::string JsonField::path_of(std::string_view key) const {
  // Plain when the key is a name ("model.vocab"), quoted otherwise.
  bool plain = !key.empty();
  for (char c : key) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  if (!plain) return path_ + "[" + Json(std::string(key)).dump() + "]";
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

JsonField::JsonField(const Json& root, std::string file)
    : JsonField(root, std::make_shared<const std::string>(std::move(file)), "", 0) {}

JsonField::JsonField(const Json& value, std::shared_ptr<const std::string> file, std::string path,
                     int depth)
    : value_(&value), file_(std::move(file)), path_(std::move(path)), depth_(depth) {}

JsonField JsonField::child(const Json& value, std::string path) const {
  // Checked on the way down, so recursion over a hostile file stops early.
  AS_CHECK(depth_ < kMaxDepth, where(), " nests more than ", kMaxDepth,
           " levels deep; a tokenizer's stages nest a few levels at most");
  return JsonField(value, file_, std::move(path), depth_ + 1);
}

std::string JsonField::path() const {
  if (path_.empty()) return "the file";
  if (path_.size() <= 160) return path_;
  return path_.substr(0, 60) + " ... " + path_.substr(path_.size() - 60);
}

std::string JsonField::where() const {
  return file_->empty() ? path() : *file_ + ": " + path();
}

bool JsonField::has(std::string_view key) const {
  if (value_->is_null()) return false;
  if (!value_->is_object()) fail_type("an object");
  const auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonField JsonField::operator[](std::string_view key) const {
  if (!value_->is_object()) fail_type("an object");
  const auto it = value_->find(key);
  return child(it == value_->end() ? null_value() : *it, path_of(key));
}

std::vector<JsonField> JsonField::elements() const {
  if (!value_->is_array()) fail_type("an array");
  std::vector<JsonField> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i)
    out.push_back(child((*value_)[i], path_ + "[" + std::to_string(i) + "]"));
  return out;
}

std::vector<std::pair<std::string, JsonField>> JsonField::members() const {
  if (!value_->is_object()) fail_type("an object");
  std::vector<std::pair<std::string, JsonField>> out;
  out.reserve(value_->size());
  for (const auto& [key, value] : value_->items())
    out.emplace_back(key, child(value, path_of(key)));
  return out;
}

std::string JsonField::string() const {
  if (!value_->is_string()) fail_type("a string");
  return value_->get<std::string>();
}

bool JsonField::flag() const {
  if (!value_->is_boolean()) fail_type("true or false");
  return value_->get<bool>();
}

int64_t JsonField::integer(int64_t lo, int64_t hi) const {
  const auto out_of_range = [&] { fail_type(cat("a whole number from ", lo, " to ", hi)); };
  if (value_->is_number_unsigned()) {
    const uint64_t v = value_->get<uint64_t>();
    if (v > static_cast<uint64_t>(hi) || static_cast<int64_t>(v) < lo) out_of_range();
    return static_cast<int64_t>(v);
  }
  if (!value_->is_number_integer()) out_of_range();
  const int64_t v = value_->get<int64_t>();
  if (v < lo || v > hi) out_of_range();
  return v;
}

std::string JsonField::string_or(std::string_view key, const std::string& otherwise) const {
  return has(key) ? (*this)[key].string() : otherwise;
}

bool JsonField::flag_or(std::string_view key, bool otherwise) const {
  return has(key) ? (*this)[key].flag() : otherwise;
}

int64_t JsonField::integer_or(std::string_view key, int64_t otherwise, int64_t lo,
                              int64_t hi) const {
  return has(key) ? (*this)[key].integer(lo, hi) : otherwise;
}

std::string JsonField::type() const {
  if (!value_->is_object()) fail_type("an object with a \"type\"");
  return string_or("type", "");
}

void JsonField::fail_type(const std::string& what) const {
  fail(where(), " must be ", what, ", not ", describe(*value_));
}

}  // namespace autoshard::tokenizer
