// libFuzzer target for KerasHub presets: the input is a preset's
// config.json, optionally followed by a line `--task--` and its task.json;
// both are written into a preset directory, which is read as autoshard's
// config (is_preset, preset_config: every backbone family, its task, the
// Hugging Face fields it becomes). Any bytes give a config or an
// autoshard::Error; never a crash, a hang or an unbounded allocation (ASan +
// UBSan, -timeout, -rss_limit_mb).
//
//   scripts/fuzz.sh [SECONDS]
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "autoshard/error.h"
#include "autoshard/models/keras_hub_model.h"

namespace {

// One preset directory per fuzzing process, rewritten for every input and
// removed at exit (never freed: the exit handler still needs the name).
const std::string& preset_dir() {
  static const std::string* dir = [] {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "keras_hub_preset_fuzz_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) __builtin_trap();
    auto* made = new std::string(pattern);
    std::atexit([] { std::filesystem::remove_all(preset_dir()); });
    return made;
  }();
  return *dir;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const std::string separator = "\n--task--\n";
  const size_t at = input.find(separator);
  const std::string& dir = preset_dir();
  write_file(dir + "/config.json", input.substr(0, at));
  const std::string task = dir + "/task.json";
  if (at == std::string::npos)
    std::filesystem::remove(task);
  else
    write_file(task, input.substr(at + separator.size()));
  (void)autoshard::keras_hub::is_preset(dir);  // never throws
  try {
    const auto config = autoshard::keras_hub::preset_config(dir);
    (void)config;
  } catch (const autoshard::Error&) {
  }
  return 0;
}
