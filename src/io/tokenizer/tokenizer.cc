// Finding a model directory's tokenizer, and streaming decoded text.
#include "autoshard/io/tokenizer.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "io/tokenizer/pipeline.h"
#include "io/tokenizer/unicode.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;

// Whether `path` is there, a dangling symbolic link included (so that it is
// refused by name rather than passed over).
bool present(const fs::path& path) {
  std::error_code ec;
  return fs::exists(fs::symlink_status(path, ec));
}

// A tokenizer file of directory `d`, inside it after symbolic links.
std::string in_dir(const fs::path& d, const char* name) {
  return file_in_directory(d.string(), name, name);
}

// A boolean of tokenizer_config.json, if the file and the key are there
// (null counts as absent).
std::optional<bool> config_flag(const fs::path& dir, const char* key) {
  if (!present(dir / "tokenizer_config.json")) return std::nullopt;
  const std::string path =
      file_in_directory(dir.string(), "tokenizer_config.json", "tokenizer_config.json");
  const std::string text = read_input_file(path, "tokenizer_config.json", uint64_t{64} << 20);
  const nlohmann::json j = parse_json_text(text, path);
  AS_CHECK(j.is_object(), path, " is not a JSON object; fix or remove it");
  if (!j.contains(key) || j[key].is_null()) return std::nullopt;
  AS_CHECK(j[key].is_boolean(), path, ": \"", key, "\" must be true or false, not ", j[key].dump());
  return j[key].get<bool>();
}

}  // namespace

bool has_tokenizer(const std::string& dir) {
  const fs::path d(dir);
  // A preset's tokenizer.json is KerasHub's layer config, not Hugging Face's.
  if (keras_hub::is_preset(dir)) return keras_hub::has_preset_tokenizer(dir);
  return present(d / "tokenizer.json") || present(d / "tokenizer.model") ||
         (present(d / "vocab.json") && present(d / "merges.txt")) || present(d / "vocab.txt");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& dir) {
  const fs::path d(dir);
  if (keras_hub::is_preset(dir) || keras_hub::has_preset_tokenizer(dir))
    return keras_hub::load_preset_tokenizer(dir);
  if (present(d / "tokenizer.json")) return load_hf_tokenizer(in_dir(d, "tokenizer.json"));
  if (present(d / "tokenizer.model"))
    return load_sentencepiece_tokenizer(in_dir(d, "tokenizer.model"),
                                        config_flag(d, "add_bos_token").value_or(true));
  if (present(d / "vocab.json") && present(d / "merges.txt"))
    return tokenizer::gpt2_tokenizer(in_dir(d, "vocab.json"), in_dir(d, "merges.txt"));
  if (present(d / "vocab.txt"))
    return tokenizer::bert_tokenizer(in_dir(d, "vocab.txt"),
                                     config_flag(d, "do_lower_case").value_or(true));
  fail(dir, " has no tokenizer: expected tokenizer.json, tokenizer.model, vocab.json with ",
       "merges.txt, or vocab.txt");
}

TextStream::TextStream(const Tokenizer& tokenizer, std::span<const int32_t> context)
    : tokenizer_(tokenizer), ids_(context.begin(), context.end()) {
  // A few tokens of context are enough for spacing; all of them would make
  // every push decode the whole prompt.
  read_ = ids_.size();
  prefix_ = read_ > 4 ? read_ - 4 : 0;
}

std::string TextStream::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  const std::string printed = tokenizer_.decode(all.subspan(prefix_, read_ - prefix_));
  const std::string text = tokenizer_.decode(all.subspan(prefix_));
  // Wait while the last character is incomplete (decoded as U+FFFD).
  if (text.size() <= printed.size() || text.ends_with(tokenizer::utf8(0xFFFD))) return "";
  prefix_ = read_;
  read_ = ids_.size();
  return text.substr(printed.size());
}

}  // namespace autoshard
