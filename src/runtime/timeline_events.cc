#include "autoshard/runtime/timeline_events.h"

namespace autoshard {

std::string lane_track_name(int device) {
  return "device " + std::to_string(device) + " gradient buckets";
}

void TimelineDocument::name_process(int pid, const std::string& name) {
  events_.push_back({{"ph", "M"},
                     {"name", "process_name"},
                     {"pid", pid},
                     {"tid", 0},
                     {"args", {{"name", name}}}});
}

void TimelineDocument::name_track(int pid, int tid, const std::string& name) {
  events_.push_back({{"ph", "M"},
                     {"name", "thread_name"},
                     {"pid", pid},
                     {"tid", tid},
                     {"args", {{"name", name}}}});
  events_.push_back({{"ph", "M"},
                     {"name", "thread_sort_index"},
                     {"pid", pid},
                     {"tid", tid},
                     {"args", {{"sort_index", tid}}}});
}

void TimelineDocument::slice(int pid, int tid, const std::string& name, const std::string& category,
                             double ts_us, double dur_us, nlohmann::json args) {
  events_.push_back({{"ph", "X"},
                     {"name", name},
                     {"cat", category},
                     {"pid", pid},
                     {"tid", tid},
                     {"ts", ts_us},
                     {"dur", dur_us},
                     {"args", std::move(args)}});
}

void TimelineDocument::counter(int pid, const std::string& name, double ts_us,
                               const std::string& series, double value) {
  events_.push_back(
      {{"ph", "C"}, {"name", name}, {"pid", pid}, {"ts", ts_us}, {"args", {{series, value}}}});
}

nlohmann::json TimelineDocument::to_json() const {
  return {{"traceEvents", events_}, {"displayTimeUnit", "ms"}};
}

}  // namespace autoshard
