// libFuzzer target for tokenizer.json, the tokenizer file a user hands
// autoshard most often: any bytes give a tokenizer or an autoshard::Error,
// and a tokenizer encodes and decodes any text (the input's own bytes
// included) or throws autoshard::Error. Any other exception, a crash, a hang
// (-timeout) or a blow-up (-rss_limit_mb) is a finding (built with ASan +
// UBSan).
//
//   scripts/fuzz.sh [SECONDS]
#include <algorithm>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/tokenizer.h"
#include "io/tokenizer/pipeline.h"

namespace {

// Encodes and decodes `text`; errors of bad input are allowed.
void round_trip(const autoshard::Tokenizer& t, const std::string& text) {
  try {
    const std::vector<int32_t> ids = t.encode(text);
    (void)t.decode(ids, /*skip_special_tokens=*/false);
  } catch (const autoshard::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;  // the JSON library's own domain
  std::unique_ptr<autoshard::Tokenizer> t;
  try {
    t = autoshard::tokenizer::hf_tokenizer_of(j, "fuzz");
  } catch (const autoshard::Error&) {
    return 0;
  }
  for (const char* text : {"Hello world's end, 12345!", "  café 日本\n\t", "<s>[CLS]<|endoftext|>"})
    round_trip(*t, text);
  round_trip(*t, bytes);
  std::vector<int32_t> ids;  // every id the tokenizer claims, a few at a time
  for (int64_t id = 0; id < std::min<int64_t>(t->vocab_size(), 512); ++id) ids.push_back(id);
  try {
    (void)t->decode(ids);
  } catch (const autoshard::Error&) {
  }
  return 0;
}
