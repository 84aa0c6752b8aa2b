// A value of a tokenizer file together with where it sits in that file, so
// that a value of the wrong type or out of range is one error naming the file
// and the JSON path ("t/tokenizer.json: model.merges[3] must be a string, not
// the number 5") instead of a library exception, and so that every stage
// reads its options the same way. Nesting is bounded here, once for all the
// stages that recurse (Sequence inside Sequence).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace autoshard::tokenizer {

using Json = nlohmann::json;

class JsonField {
 public:
  /// How deep a tokenizer's stages may nest: real files nest two or three
  /// levels; the bound keeps loading linear and the stack small.
  static constexpr int kMaxDepth = 64;

  /// The whole file's value; `file` names it in errors ("" for built-in
  /// stages, whose errors name the stage).
  JsonField(const Json& root, std::string file);

  const Json& json() const { return *value_; }
  /// "model.vocab" ("the file" at the root; a deep path shortened).
  std::string path() const;
  /// "FILE: PATH", the start of an error about this value.
  std::string where() const;
  /// "FILE", for errors about the file as a whole.
  const std::string& file() const { return *file_; }

  /// Absent or JSON null.
  bool is_null() const { return value_->is_null(); }
  /// Whether this object has `key`, not null (false for null; an error for
  /// anything but an object).
  bool has(std::string_view key) const;

  /// The member `key` of this object (null when absent); an error unless
  /// this is an object.
  JsonField operator[](std::string_view key) const;
  /// The elements of this array; an error for anything else.
  std::vector<JsonField> elements() const;
  /// The members of this object, by key (the JSON library keeps them
  /// sorted); an error for anything else.
  std::vector<std::pair<std::string, JsonField>> members() const;
  /// The number of elements or members (0 for null).
  size_t size() const { return value_->is_structured() ? value_->size() : 0; }

  std::string string() const;
  bool flag() const;
  /// A whole number in [lo, hi] (a fraction, 1e30 or a string is an error).
  int64_t integer(int64_t lo, int64_t hi) const;
  /// Member `key` when present and not null, else `otherwise`.
  std::string string_or(std::string_view key, const std::string& otherwise) const;
  bool flag_or(std::string_view key, bool otherwise) const;
  int64_t integer_or(std::string_view key, int64_t otherwise, int64_t lo, int64_t hi) const;
  /// The "type" member of a stage's object ("" when absent).
  std::string type() const;

  /// Throws "FILE: PATH must be WHAT, not <this value>".
  [[noreturn]] void fail_type(const std::string& what) const;

 private:
  JsonField(const Json& value, std::shared_ptr<const std::string> file, std::string path,
            int depth);
  JsonField child(const Json& value, std::string path) const;
  std::string path_of(std::string_view key) const;  // of the member `key`

  const Json* value_;                        // owned by the caller's root value
  std::shared_ptr<const std::string> file_;  // shared: a vocabulary has many fields
  std::string path_;
  int depth_ = 0;
};

}  // namespace autoshard::tokenizer
