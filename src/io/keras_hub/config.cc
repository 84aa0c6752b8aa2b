// Whether a directory is a KerasHub preset. Reading its config is the model
// families' (src/models/keras_hub_model.cc).
#include <filesystem>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/keras_hub_preset.h"
#include "autoshard/json.h"

namespace autoshard::keras_hub {

namespace fs = std::filesystem;
using nlohmann::json;

json read_preset_json(const std::string& path, const std::string& what) {
  const std::string text = read_input_file(path, what, 64 << 20);
  return parse_json_text(text, what + " '" + path + "'");
}

bool is_preset(const std::string& dir) {
  const fs::path config = fs::path(dir) / "config.json";
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || !fs::is_regular_file(config, ec)) return false;
  // A KerasHub config.json names its class and module; a Hugging Face one
  // has model_type, an unzipped .keras file a model's class.
  try {
    const json j =
        read_preset_json(file_in_directory(dir, "config.json", "config.json"), "config.json");
    if (!j.is_object() || !j.contains("class_name") || !j["class_name"].is_string() ||
        !j.contains("config"))
      return false;
    return json_string_or(j, "module", "", "config.json").starts_with("keras_hub") ||
           j["class_name"].get<std::string>().ends_with("Backbone");
  } catch (const Error&) {
    return false;
  }
}

}  // namespace autoshard::keras_hub
