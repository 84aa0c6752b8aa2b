// libFuzzer target for TensorFlow.js models: the input is a model.json, or a
// model.json, the line "--shard--" and the bytes of its one shard
// (group1-shard1of1.bin). modelTopology is parsed as an architecture and the
// weightsManifest's weights (float32, int32, quantized uint8/uint16,
// float16) are read from the shard. Any bytes give an autoshard::Error or a
// result; never a crash, a hang or an unbounded allocation (ASan + UBSan,
// -timeout, -rss_limit_mb).
//
//   scripts/fuzz.sh [SECONDS]
#include <stdlib.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "io/keras/architecture.h"
#include "io/keras/weight_table.h"
#include "keras_fuzz_util.h"

namespace {
// One scratch directory per process, holding model.json and the shard.
const std::string& scratch() {
  static const std::string dir = [] {
    char name[] = "/tmp/keras_tfjs_fuzz_XXXXXX";
    if (!::mkdtemp(name)) __builtin_trap();
    return std::string(name);
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace autoshard::keras;
  const std::string all(reinterpret_cast<const char*>(data), size);
  const std::string mark = "\n--shard--\n";
  const size_t at = all.find(mark);
  const std::string json_text = all.substr(0, at);
  const std::string shard = at == std::string::npos ? "" : all.substr(at + mark.size());
  const std::string dir = scratch();
  std::ofstream(dir + "/group1-shard1of1.bin", std::ios::binary | std::ios::trunc) << shard;
  const nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return 0;
  try {
    if (doc.contains("modelTopology")) {
      nlohmann::json topology = doc.at("modelTopology");
      if (topology.is_object() && topology.contains("model_config"))
        topology = topology.at("model_config");
      parse_model(topology, Dialect::TFJS, "fuzz model.json");
    }
  } catch (const autoshard::Error&) {
  }
  try {
    if (!doc.contains("weightsManifest")) return 0;
    const WeightTable table = tfjs_weights(doc.at("weightsManifest"), dir, dir + "/model.json");
    for (const auto& [name, w] : table) {
      int64_t n = 1;
      for (int64_t d : w.shape) n *= d;
      if (n < 0 || n > (1 << 16)) continue;
      std::vector<float> values(static_cast<size_t>(n));
      w.read(std::vector<int64_t>(w.shape.size(), 0), w.shape, values.data());
    }
  } catch (const autoshard::Error&) {
  }
  return 0;
}
