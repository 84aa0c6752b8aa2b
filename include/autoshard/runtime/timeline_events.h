// TimelineDocument: a timeline in the Chrome Trace Event Format, the JSON that
// Perfetto (ui.perfetto.dev) and chrome://tracing open:
//   {"traceEvents": [...], "displayTimeUnit": "ms"}
// with complete events ("ph": "X", a slice with ts and dur in microseconds),
// metadata events ("ph": "M", naming processes and threads) and counter
// events ("ph": "C", a value over time). Both timelines autoshard writes,
// of real steps (runtime/timeline.h) and of predicted ones
// (plan/predicted_timeline.h), are built with it, so that they open side by
// side with the same track and slice names.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace autoshard {

// The track (Chrome's tid) of each kind of row: the step boundaries first,
// then one per device.
constexpr int kStepsTrack = 0;
inline int device_track(int device) {
  return device + 1;
}
// A device's communication lane (its gradient buckets, runtime/overlap.h),
// drawn after every device's own track.
inline int lane_track(int device) {
  return 100000 + device;
}
std::string lane_track_name(int device);  // "device 3 gradient buckets"
// The slice of one bucket's reduction, measured or predicted.
inline constexpr const char* kBucketSliceName = "all_reduce gradient bucket";

class TimelineDocument {
 public:
  // Names process `pid` (a timeline holds one per process or prediction)
  // and its track `tid`; sort_index orders the tracks in the viewer.
  void name_process(int pid, const std::string& name);
  void name_track(int pid, int tid, const std::string& name);
  // A slice of `dur_us` microseconds from `ts_us` on track (pid, tid).
  void slice(int pid, int tid, const std::string& name, const std::string& category, double ts_us,
             double dur_us, nlohmann::json args = nlohmann::json::object());
  // One value of counter `name` of process `pid` from `ts_us` on.
  void counter(int pid, const std::string& name, double ts_us, const std::string& series,
               double value);
  size_t size() const { return events_.size(); }
  // {"traceEvents": [...], "displayTimeUnit": "ms"}.
  nlohmann::json to_json() const;
  std::string dump() const { return to_json().dump() + "\n"; }

 private:
  nlohmann::json events_ = nlohmann::json::array();
};

}  // namespace autoshard
