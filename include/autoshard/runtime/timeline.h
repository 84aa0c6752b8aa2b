// TimelineRecorder: records timelines of real steps (Chrome Trace Event Format, see
// runtime/timeline_events.h) for Perfetto: one track per device with every op
// as a slice (named and annotated as runtime/timeline_ops.h says), a "steps"
// track with each run of a compiled step, and each device's memory in use
// as a counter.
//
//   TimelineRecorder timeline({.first_step = 3, .last_step = 5});
//   { TimelineScope scope(timeline); model.fit(x, y); }   // or step.set_timeline(&timeline)
//   timeline.write("steps.json");
//
// Recording off costs one null check per op; on, two clock reads and a
// record per op, named when the step ends (bench/README.md has the cost).
// Under mpirun each process records its own device: write() puts rank N's
// timeline in FILE.rankN.json (timeline_file_of_rank).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/runtime/timeline_events.h"
#include "autoshard/runtime/timeline_ops.h"

namespace autoshard {

// The steps a TimelineRecorder records: first..last, 1-based optimizer steps, inclusive.
struct TimelineSteps {
  int64_t first = 1;
  int64_t last = INT64_MAX;
  bool contains(int64_t step) const { return step >= first && step <= last; }
};
// Parses "a:b" (steps a to b), "a:" (a on), ":b" or "a" (step a only); bad
// text or a > b throws naming `flag`.
TimelineSteps parse_timeline_steps(const std::string& text,
                                   const std::string& flag = "--trace-steps");

// Under mpirun: "run.json" -> "run.rank1.json" for rank 1; else `path`.
std::string timeline_file_of_rank(const std::string& path, int rank, bool distributed);

// One op's run, as the executor timed it.
struct OpSpan {
  int node;
  int64_t begin_ns, end_ns;  // steady_clock
};

class TimelineRecorder {
 public:
  explicit TimelineRecorder(TimelineSteps steps = {});
  bool records(int64_t step) const { return steps_.contains(step); }

  // The executor's hook: device `device` ran `spans` of the program
  // `program` describes (thread-safe; one call per device and run). Slices
  // are named when the document is made, not during the step.
  void add_ops(int device, std::shared_ptr<const ProgramDescription> program,
               std::vector<OpSpan> spans);
  // The device's communication lane in the same run: its gradient buckets
  // (runtime/overlap.h) as the lane reduced them.
  void add_lane(int device, std::vector<LaneSpan> spans);
  // A run of a compiled step for optimizer step `step` (1-based); `updates`:
  // a training step (else an evaluation or a forward pass).
  void add_run(int64_t step, bool updates, int64_t begin_ns, int64_t end_ns);
  // Runs of compiled steps recorded so far.
  int64_t runs() const;

  // The timeline so far (process `pid`, named `process`).
  TimelineDocument document(int pid = 0, const std::string& process = "autoshard") const;
  // Writes it to `path` (a plain write; the CLI writes atomically); an
  // unwritable path throws naming it.
  void write(const std::string& path) const;

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

 private:
  struct DeviceRun {
    int device;
    std::shared_ptr<const ProgramDescription> program;
    std::vector<OpSpan> spans;
  };
  struct Run {
    int64_t step;
    bool updates;
    int64_t begin_ns, end_ns;
  };
  double us(int64_t ns) const { return double(ns - origin_ns_) / 1e3; }

  TimelineSteps steps_;
  int64_t origin_ns_;
  mutable std::mutex mutex_;
  std::vector<DeviceRun> device_runs_;
  std::vector<std::pair<int, std::vector<LaneSpan>>> lane_runs_;  // (device, spans)
  std::vector<Run> runs_;
};

// While a TimelineScope lives, every compiled step that has no timeline of its
// own records into `timeline` (Model::fit, train_on_batch, ... need no
// change). Scopes nest; the innermost live one wins, and one that ends out
// of order removes only itself.
class TimelineScope {
 public:
  explicit TimelineScope(TimelineRecorder& timeline);
  ~TimelineScope();
  TimelineScope(const TimelineScope&) = delete;
  TimelineScope& operator=(const TimelineScope&) = delete;

 private:
  TimelineRecorder* timeline_;
};
// The innermost scope's timeline, or null.
TimelineRecorder* active_timeline();

}  // namespace autoshard
