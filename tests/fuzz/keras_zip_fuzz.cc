// libFuzzer target for `.keras` archives: the zip checks (names, links,
// sizes, inflation bounds), config.json parsed as Keras 3's architecture,
// and model.weights.h5 opened in place and walked. Any bytes give an
// autoshard::Error or a result; never a crash, a hang, a write outside
// memory or an unbounded allocation (ASan + UBSan, -timeout, -rss_limit_mb).
//
//   scripts/fuzz.sh [SECONDS]
#include <nlohmann/json.hpp>

#include "io/keras/architecture.h"
#include "keras_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autoshard;
  using namespace autoshard::keras;
  keras_fuzz::MemFile file(data, size);
  try {
    ZipArchive zip(file.path);
    for (const std::string& name : zip.names()) {
      if (name == "config.json") {
        const nlohmann::json config =
            nlohmann::json::parse(zip.read_text(name, 1 << 20), nullptr, false);
        try {
          if (!config.is_discarded()) parse_model(config, Dialect::Keras3, "fuzz.keras");
        } catch (const autoshard::Error&) {
        }
      } else if (name == "model.weights.h5") {
        try {
          const auto h5 = H5File::open(zip.open_member(name), "fuzz.keras: model.weights.h5");
          int budget = 256;
          keras_fuzz::walk(*h5, "", 0, budget);
        } catch (const autoshard::Error&) {
        }
      } else {
        zip.read_text(name, 1 << 16);
      }
    }
  } catch (const autoshard::Error&) {
  }
  return 0;
}
