#include "cli/training_log.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/json.h"

namespace autoshard::cli {

const std::vector<std::string>& training_log_fields() {
  static const std::vector<std::string> fields = {
      "loss", "val_loss", "lr", "tokens_per_second", "examples_per_second", "step_ms"};
  return fields;
}

TrainingLog read_training_log(const std::string& path) {
  const std::string text = read_input_file(path, "report: log", uint64_t{1} << 30);
  // field -> step -> value; the map orders by step and keeps the later line.
  std::map<std::string, std::map<double, double>> by_step;
  std::map<double, bool> steps;
  size_t begin = 0;
  for (int line = 1; begin < text.size(); ++line) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string s = text.substr(begin, end - begin);
    begin = end + 1;
    if (s.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "report: '" + path + "' line " + std::to_string(line);
    nlohmann::json j;
    try {
      j = parse_json_text(s, where);
    } catch (const Error& e) {
      fail(e.what(), "; give the JSON-lines log of train --log");
    }
    AS_CHECK(j.is_object(), where, " is not a JSON object; give the JSON-lines log of train --log");
    AS_CHECK(j.contains("step") && j["step"].is_number() && std::isfinite(j["step"].get<double>()),
             where, " has no numeric \"step\" field; each line of train --log's file has one");
    const double step = j["step"].get<double>();
    steps[step] = true;
    for (const std::string& f : training_log_fields()) {
      if (!j.contains(f) || j[f].is_null()) continue;
      AS_CHECK(j[f].is_number(), where, ": \"", f, "\" is ", j[f].dump(), ", not a number");
      by_step[f][step] = j[f].get<double>();
    }
  }
  AS_CHECK(!steps.empty(), "report: '", path,
           "' holds no step; give the JSON-lines log of train --log");
  TrainingLog log;
  log.path = path;
  log.steps = steps.size();
  for (const auto& [field, values] : by_step)
    log.series[field].assign(values.begin(), values.end());
  return log;
}

}  // namespace autoshard::cli
