#include "autoshard/runtime/timeline.h"

#include <fstream>
#include <set>

#include "autoshard/error.h"

namespace autoshard {

TimelineSteps parse_timeline_steps(const std::string& text, const std::string& flag) {
  const std::string usage = cat(flag, " '", text,
                                "' must be STEP, FIRST:LAST, FIRST: or :LAST with 1 <= FIRST <= "
                                "LAST (1-based optimizer steps, inclusive)");
  auto number = [&](const std::string& part) -> int64_t {
    AS_CHECK(!part.empty() && part.size() <= 18 &&
                 part.find_first_not_of("0123456789") == std::string::npos,
             usage);
    return std::stoll(part);
  };
  TimelineSteps s;
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    s.first = s.last = number(text);
  } else {
    const std::string a = text.substr(0, colon), b = text.substr(colon + 1);
    AS_CHECK(!(a.empty() && b.empty()), usage);
    if (!a.empty()) s.first = number(a);
    if (!b.empty()) s.last = number(b);
  }
  AS_CHECK(s.first >= 1 && s.first <= s.last, usage);
  return s;
}

std::string timeline_file_of_rank(const std::string& path, int rank, bool distributed) {
  if (!distributed) return path;
  const std::string suffix = ".json";
  const std::string stem =
      path.ends_with(suffix) ? path.substr(0, path.size() - suffix.size()) : path;
  return cat(stem, ".rank", rank, suffix);
}

TimelineRecorder::TimelineRecorder(TimelineSteps steps) : steps_(steps), origin_ns_(now_ns()) {}

void TimelineRecorder::add_ops(int device, std::shared_ptr<const ProgramDescription> program,
                               std::vector<OpSpan> spans) {
  std::lock_guard<std::mutex> lock(mutex_);
  device_runs_.push_back({device, std::move(program), std::move(spans)});
}

void TimelineRecorder::add_lane(int device, std::vector<LaneSpan> spans) {
  if (spans.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  lane_runs_.emplace_back(device, std::move(spans));
}

void TimelineRecorder::add_run(int64_t step, bool updates, int64_t begin_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> lock(mutex_);
  runs_.push_back({step, updates, begin_ns, end_ns});
}

int64_t TimelineRecorder::runs() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(runs_.size());
}

TimelineDocument TimelineRecorder::document(int pid, const std::string& process) const {
  std::lock_guard<std::mutex> lock(mutex_);
  TimelineDocument doc;
  doc.name_process(pid, process);
  doc.name_track(pid, kStepsTrack, "steps");
  std::set<int> devices;
  for (const DeviceRun& r : device_runs_) devices.insert(r.device);
  for (int d : devices) doc.name_track(pid, device_track(d), cat("device ", d));
  std::set<int> lanes;
  for (const auto& [d, spans] : lane_runs_) lanes.insert(d);
  for (int d : lanes) doc.name_track(pid, lane_track(d), lane_track_name(d));
  for (const auto& [d, spans] : lane_runs_)
    for (const LaneSpan& s : spans)
      doc.slice(pid, lane_track(d), kBucketSliceName, "collective", us(s.begin_ns),
                double(s.end_ns - s.begin_ns) / 1e3, {{"members", s.members}, {"bytes", s.bytes}});
  for (const Run& r : runs_)
    doc.slice(pid, kStepsTrack,
              r.updates ? cat("step ", r.step) : cat("forward (step ", r.step, ")"), "step",
              us(r.begin_ns), double(r.end_ns - r.begin_ns) / 1e3,
              {{"step", r.step}, {"training", r.updates}});
  for (const DeviceRun& r : device_runs_) {
    const std::string memory = cat("memory in use (device ", r.device, ")");
    for (const OpSpan& s : r.spans) {
      const TimelineOp& op = r.program->ops[s.node];
      doc.slice(pid, device_track(r.device), op.name, op.category, us(s.begin_ns),
                double(s.end_ns - s.begin_ns) / 1e3, op.args);
      doc.counter(pid, memory, us(s.end_ns), "bytes", r.program->live_bytes[s.node]);
    }
  }
  return doc;
}

void TimelineRecorder::write(const std::string& path) const {
  const std::string text = document().dump();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  AS_CHECK(out.good(), "trace '", path, "' cannot be written (is its directory there?)");
  out << text;
  out.close();
  AS_CHECK(out.good(), "trace '", path, "': writing failed");
}

namespace {
// The live scopes' tracers, innermost last. A scope leaves by identity, so
// scopes that end out of order (Python's context managers may) never leave
// a destroyed timeline active.
struct Scopes {
  std::mutex mu;
  std::vector<TimelineRecorder*> tracers;
};
Scopes& scopes() {
  static Scopes s;
  return s;
}
}  // namespace

TimelineScope::TimelineScope(TimelineRecorder& timeline) : timeline_(&timeline) {
  std::lock_guard<std::mutex> lock(scopes().mu);
  scopes().tracers.push_back(timeline_);
}

TimelineScope::~TimelineScope() {
  std::lock_guard<std::mutex> lock(scopes().mu);
  std::vector<TimelineRecorder*>& t = scopes().tracers;
  for (size_t k = t.size(); k-- > 0;)
    if (t[k] == timeline_) {
      t.erase(t.begin() + static_cast<std::ptrdiff_t>(k));
      break;
    }
}

TimelineRecorder* active_timeline() {
  std::lock_guard<std::mutex> lock(scopes().mu);
  return scopes().tracers.empty() ? nullptr : scopes().tracers.back();
}

}  // namespace autoshard
