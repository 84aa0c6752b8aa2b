// libFuzzer target for HDF5 files as the Keras readers see them (a legacy
// .h5, or a .keras's model.weights.h5 read through the zip-member driver):
// the model_config and training_config attributes parsed as Keras 2's
// architecture, every group walked, every small dataset read. Any bytes give
// an autoshard::Error or a result; never a crash, a hang or an unbounded
// allocation (ASan + UBSan, -timeout, -rss_limit_mb).
//
//   scripts/fuzz.sh [SECONDS]
#include <nlohmann/json.hpp>

#include "io/keras/architecture.h"
#include "keras_fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autoshard::keras;
  try {
    const auto h5 = H5File::open(keras_fuzz::member_of(data, size), "fuzz.h5");
    if (const auto mc = h5->string_attribute("", "model_config")) {
      const nlohmann::json config = nlohmann::json::parse(*mc, nullptr, false);
      if (!config.is_discarded()) parse_model(config, Dialect::Keras2, "fuzz.h5");
    }
    int budget = 256;
    keras_fuzz::walk(*h5, "", 0, budget);
  } catch (const autoshard::Error&) {
  }
  return 0;
}
