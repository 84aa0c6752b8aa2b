// Reading JSON that comes from a file: the one parser every JSON door uses
// (.keras config.json and metadata.json, a legacy .h5's model_config,
// TensorFlow.js model.json, KerasHub presets, Hugging Face configs and
// tokenizers, cluster files, layout maps, checkpoints, logs), and typed reads
// of its members that fail with one error naming the file and the field:
// json_member and json_*_or for one flat object, JsonField for walking a
// tree with its path (a tokenizer's stages).
//
// The parser refuses nesting deeper than kMaxJsonDepth while it parses: the
// JSON library's parser is iterative, but copying, printing and walking a
// parsed value recurse once per level, so 100,000 nested brackets would
// overflow the stack after parsing. Below every layer, like error.h.
#pragma once

#include <cctype>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "autoshard/error.h"

namespace autoshard {

// The deepest nesting of arrays and objects a JSON file may have. A Keras
// model nested as a layer takes 3 levels per model, so this admits models
// nested about 170 deep (real ones nest a few levels; docs/keras-files.md,
// "Limits of a model file").
constexpr int kMaxJsonDepth = 512;

namespace json_detail {
struct TooDeep {};  // thrown by the parser's callback, caught below

// nlohmann's DOM builder (what json::parse uses) counting the arrays and
// objects open: sax_parse calls these members by the builder's own type, so
// they wrap the base's. Its errors throw as json::parse's do.
class DepthLimitedBuilder : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
  using Base = nlohmann::detail::json_sax_dom_parser<nlohmann::json>;

 public:
  explicit DepthLimitedBuilder(nlohmann::json& out) : Base(out, /*allow_exceptions=*/true) {}
  bool start_object(std::size_t n) { return open() && Base::start_object(n); }
  bool start_array(std::size_t n) { return open() && Base::start_array(n); }
  bool end_object() {
    --depth_;
    return Base::end_object();
  }
  bool end_array() {
    --depth_;
    return Base::end_array();
  }

 private:
  bool open() {
    if (++depth_ > kMaxJsonDepth) throw TooDeep{};
    return true;
  }
  int depth_ = 0;
};

// The JSON library's message without its id ("[json.exception.type_error.302]
// ") and without the text it quotes from the file ("last read: '...'",
// "parsing '1e999'"): a refused file's contents never appear in a message.
inline std::string library_words(const nlohmann::json::exception& e) {
  std::string_view what = e.what();
  if (const size_t close = what.find("] "); what.starts_with("[json.") && close != what.npos)
    what.remove_prefix(close + 2);
  for (const char* quoting : {"; last read: '", " parsing '"})
    if (const size_t at = what.find(quoting); at != what.npos) what = what.substr(0, at);
  if (e.id == 406) return "a number is out of range (a double's)";
  return std::string(what);
}

// A value as an error message shows it: its kind, and short values whole
// ("the string \"x\"", "the number 5").
inline std::string describe_value(const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string: {
      const std::string s = j.get<std::string>();
      return s.size() <= 40 ? "the string " + j.dump() : "a string of " + std::to_string(s.size());
    }
    case nlohmann::json::value_t::boolean:
      return j.get<bool>() ? "true" : "false";
    default:
      return "the number " + j.dump();
  }
}
}  // namespace json_detail

// Parses `text`, a JSON document read from `where` ("Keras file 'm.keras':
// config.json"). Throws Error "WHERE is not valid JSON: ..." or "WHERE nests
// arrays and objects deeper than 512 levels ...". `watch`, when given, sees
// every parse event as nlohmann's parser callback does (its result is kept).
inline nlohmann::json parse_json_text(std::string_view text, const std::string& where,
                                      const nlohmann::json::parser_callback_t& watch = nullptr) {
  using Event = nlohmann::json::parse_event_t;
  // `depth` counts the containers around the event: 0 for the document's own.
  auto limit = [&watch](int depth, Event event, nlohmann::json& parsed) {
    if ((event == Event::object_start || event == Event::array_start) && depth >= kMaxJsonDepth)
      throw json_detail::TooDeep{};
    return watch(depth, event, parsed);
  };
  try {
    if (watch) return nlohmann::json::parse(text, limit);
    // Without a watcher, the library's own builder with a depth count (the
    // callback parser above takes 1.5 times as long on a tokenizer.json).
    nlohmann::json out;
    json_detail::DepthLimitedBuilder builder(out);
    nlohmann::json::sax_parse(text, &builder);
    return out;
  } catch (const json_detail::TooDeep&) {
    fail(where, " nests arrays and objects deeper than ", kMaxJsonDepth,
         " levels (autoshard's limit for a JSON file; real files nest a few levels)");
  } catch (const nlohmann::json::parse_error& e) {
    fail(where, " is not valid JSON: ", json_detail::library_words(e), " at byte ", e.byte);
  } catch (const nlohmann::json::exception& e) {  // out_of_range.406: 1e999
    fail(where, " is not valid JSON: ", json_detail::library_words(e));
  }
}

// The name of a JSON value's type for messages ("a number", "a string").
inline std::string json_type_phrase(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::array:
      return "a list";
    case nlohmann::json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

// Member `key` of `obj` when `obj` is an object holding it and it is not
// null; else nullptr.
inline const nlohmann::json* json_member(const nlohmann::json& obj, std::string_view key) {
  if (!obj.is_object()) return nullptr;
  const auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// Member `key` of `obj` as a string; `otherwise` when it (or `obj`) is absent
// or null. Another type is an error "WHERE: 'KEY' must be a string, not a
// number" (`where` names the file and the object's path).
inline std::string json_string_or(const nlohmann::json& obj, std::string_view key,
                                  const std::string& otherwise, const std::string& where) {
  const nlohmann::json* v = json_member(obj, key);
  if (!v) return otherwise;
  AS_CHECK(v->is_string(), where, ": '", key, "' must be a string, not ", json_type_phrase(*v));
  return v->get<std::string>();
}

// Member `key` as true or false (absent or null: `otherwise`).
inline bool json_bool_or(const nlohmann::json& obj, std::string_view key, bool otherwise,
                         const std::string& where) {
  const nlohmann::json* v = json_member(obj, key);
  if (!v) return otherwise;
  AS_CHECK(v->is_boolean(), where, ": '", key, "' must be true or false, not ",
           json_type_phrase(*v));
  return v->get<bool>();
}

// Member `key` as a number (absent or null: `otherwise`).
inline double json_number_or(const nlohmann::json& obj, std::string_view key, double otherwise,
                             const std::string& where) {
  const nlohmann::json* v = json_member(obj, key);
  if (!v) return otherwise;
  AS_CHECK(v->is_number(), where, ": '", key, "' must be a number, not ", json_type_phrase(*v));
  return v->get<double>();
}

// A value of a JSON file together with where it sits in that file, so that a
// value of the wrong type or out of range is one error naming the file and
// the JSON path ("t/tokenizer.json: model.merges[3] must be a string, not
// the number 5") instead of a library exception, and so that every reader
// of a nested file (a tokenizer's stages) reads its options the same way.
// Nesting is bounded here, once for all the readers that recurse (Sequence
// inside Sequence). The free functions above are for flat objects; this is
// for walking a tree.
class JsonField {
 public:
  /// How deep a reader may follow nesting: tokenizer files nest two or three
  /// levels; the bound keeps loading linear and the stack small.
  static constexpr int kMaxDepth = 64;

  /// The whole file's value; `file` names it in errors ("" for built-in
  /// values, whose errors name their reader).
  JsonField(const nlohmann::json& root, std::string file)
      : JsonField(root, std::make_shared<const std::string>(std::move(file)), "", 0) {}

  const nlohmann::json& json() const { return *value_; }
  /// "model.vocab" ("the file" at the root; a deep path shortened).
  std::string path() const {
    if (path_.empty()) return "the file";
    if (path_.size() <= 160) return path_;
    return path_.substr(0, 60) + " ... " + path_.substr(path_.size() - 60);
  }
  /// "FILE: PATH", the start of an error about this value.
  std::string where() const { return file_->empty() ? path() : *file_ + ": " + path(); }
  /// "FILE", for errors about the file as a whole.
  const std::string& file() const { return *file_; }

  /// Absent or JSON null.
  bool is_null() const { return value_->is_null(); }
  /// Whether this object has `key`, not null (false for null; an error for
  /// anything but an object).
  bool has(std::string_view key) const {
    if (value_->is_null()) return false;
    if (!value_->is_object()) fail_type("an object");
    return json_member(*value_, key) != nullptr;
  }

  /// The member `key` of this object (null when absent); an error unless
  /// this is an object.
  JsonField operator[](std::string_view key) const {
    static const nlohmann::json null;
    if (!value_->is_object()) fail_type("an object");
    const auto it = value_->find(key);
    return child(it == value_->end() ? null : *it, path_of(key));
  }
  /// The elements of this array; an error for anything else.
  std::vector<JsonField> elements() const {
    if (!value_->is_array()) fail_type("an array");
    std::vector<JsonField> out;
    out.reserve(value_->size());
    for (size_t i = 0; i < value_->size(); ++i)
      out.push_back(child((*value_)[i], path_ + "[" + std::to_string(i) + "]"));
    return out;
  }
  /// The members of this object, by key (the JSON library keeps them
  /// sorted); an error for anything else.
  std::vector<std::pair<std::string, JsonField>> members() const {
    if (!value_->is_object()) fail_type("an object");
    std::vector<std::pair<std::string, JsonField>> out;
    out.reserve(value_->size());
    for (const auto& [key, value] : value_->items())
      out.emplace_back(key, child(value, path_of(key)));
    return out;
  }
  /// The number of elements or members (0 for null).
  size_t size() const { return value_->is_structured() ? value_->size() : 0; }

  std::string string() const {
    if (!value_->is_string()) fail_type("a string");
    return value_->get<std::string>();
  }
  bool flag() const {
    if (!value_->is_boolean()) fail_type("true or false");
    return value_->get<bool>();
  }
  /// A whole number in [lo, hi] (a fraction, 1e30 or a string is an error).
  int64_t integer(int64_t lo, int64_t hi) const {
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
  /// Member `key` when present and not null, else `otherwise`.
  std::string string_or(std::string_view key, const std::string& otherwise) const {
    return has(key) ? (*this)[key].string() : otherwise;
  }
  bool flag_or(std::string_view key, bool otherwise) const {
    return has(key) ? (*this)[key].flag() : otherwise;
  }
  int64_t integer_or(std::string_view key, int64_t otherwise, int64_t lo, int64_t hi) const {
    return has(key) ? (*this)[key].integer(lo, hi) : otherwise;
  }
  /// The "type" member of an object (a tokenizer stage's; "" when absent).
  std::string type() const {
    if (!value_->is_object()) fail_type("an object with a \"type\"");
    return string_or("type", "");
  }

  /// Throws "FILE: PATH must be WHAT, not <this value>".
  [[noreturn]] void fail_type(const std::string& what) const {
    fail(where(), " must be ", what, ", not ", json_detail::describe_value(*value_));
  }

 private:
  JsonField(const nlohmann::json& value, std::shared_ptr<const std::string> file, std::string path,
            int depth)
      : value_(&value), file_(std::move(file)), path_(std::move(path)), depth_(depth) {}

  JsonField child(const nlohmann::json& value, std::string path) const {
    // Checked on the way down, so recursion over a hostile file stops early.
    AS_CHECK(depth_ < kMaxDepth, where(), " nests more than ", kMaxDepth,
             " levels deep; a tokenizer's stages nest a few levels at most");
    return JsonField(value, file_, std::move(path), depth_ + 1);
  }

  // The path of the member `key`: plain when the key is a name
  // ("model.vocab"), quoted otherwise.
  std::string path_of(std::string_view key) const {
    bool plain = !key.empty();
    for (char c : key) plain = plain && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
    if (!plain) return path_ + "[" + nlohmann::json(std::string(key)).dump() + "]";
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }

  const nlohmann::json* value_;              // owned by the caller's root value
  std::shared_ptr<const std::string> file_;  // shared: a vocabulary has many fields
  std::string path_;
  int depth_ = 0;
};
// `v` as an int64 when it is a whole number: an integer, or a float with no
// fraction well inside int64's range (3.0 counts); nullopt for anything else
// (1.5, "3", true, an unsigned one past INT64_MAX). Callers word the error.
inline std::optional<int64_t> json_whole_number(const nlohmann::json& v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::abs(d) < 9.0e18 && d == static_cast<double>(static_cast<int64_t>(d)))
      return static_cast<int64_t>(d);
    return std::nullopt;
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) return std::nullopt;
  if (!v.is_number_integer()) return std::nullopt;
  return v.get<int64_t>();
}

// Runs `read` (code reading a JSON document from `where`) so that a JSON
// library exception it lets escape (a value of the wrong type, a missing
// key read with at()) becomes one Error naming the file, never an "internal
// error". Typed reads that name the field are better; this is the backstop.
template <typename Read>
decltype(auto) with_json_errors(const std::string& where, Read&& read) {
  try {
    return std::forward<Read>(read)();
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": a value has the wrong type or is out of range (", json_detail::library_words(e),
         ")");
  }
}

}  // namespace autoshard
