// libFuzzer target for the JSON a user hands autoshard: model configs
// (config.json) and checkpoint states (state.json). Any bytes give a valid
// value or an autoshard::Error; any other exception, a crash or a hang is a
// finding (built with ASan + UBSan).
//
//   scripts/fuzz.sh [SECONDS]
#include <cstdint>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/llama/llama.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    autoshard::GPT2Config c = autoshard::GPT2Config::from_json_text(text, "fuzz");
    (void)c;
  } catch (const autoshard::Error&) {
  }
  try {
    autoshard::LlamaConfig c = autoshard::LlamaConfig::from_json_text(text, "fuzz");
    (void)c;
  } catch (const autoshard::Error&) {
  }
  try {
    nlohmann::json s = autoshard::parse_state(text, "fuzz");
    (void)s;
  } catch (const autoshard::Error&) {
  }
  return 0;
}
