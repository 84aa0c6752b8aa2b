// The state.json of a checkpoint, checked field by field (kept apart so a
// fuzzer can reach the parser alone).
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/json.h"
#include "autoshard/io/checkpoint.h"

namespace autoshard {

nlohmann::json parse_state(const std::string& text, const std::string& source) {
  nlohmann::json state = parse_json_text(text, "checkpoint state '" + source + "'");
  AS_CHECK(state.is_object(), "checkpoint state '", source, "' must be a JSON object");
  const std::string format =
      state.contains("format") && state["format"].is_string() ? state["format"].get<std::string>()
                                                              : "";
  AS_CHECK(format == kCheckpointFormat, "'", source, "' is not an autoshard checkpoint state (format '",
           format, "', expected '", kCheckpointFormat, "')");
  // Counters are whole numbers >= 0; text such as "4" is not read as one.
  for (const char* key : {"step", "data_position", "batch", "seq"}) {
    if (!state.contains(key)) {
      AS_CHECK(std::string(key) != "step", "checkpoint state '", source, "' lacks \"step\"");
      continue;
    }
    AS_CHECK(state[key].is_number_unsigned(), "checkpoint state '", source, "': \"", key,
             "\" must be a whole number >= 0, got ", state[key].dump());
  }
  return state;
}

}  // namespace autoshard
