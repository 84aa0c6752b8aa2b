#include "autoshard/plan/predicted_timeline.h"

#include <algorithm>

#include "autoshard/error.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/runtime/timeline_ops.h"

namespace autoshard {
namespace {

// A bucket's slice: what it reduces, as a measured trace annotates collectives.
nlohmann::json bucket_args(const Graph& g, const GradientBucket& b,
                           const std::vector<std::string>& axis_names, bool bf16) {
  return {{"members", b.members.size()},
          {"bytes", double(b.count) * (bf16 ? 2 : 4)},
          {"axis", axis_name(axis_names, b.axis)},
          {"first_gradient", g.node(b.members.front()).shape}};
}

}  // namespace

TimelineDocument predicted_timeline(const Partition& p, const Cluster& c, const PredictOptions& o,
                                    int max_devices, int pid, const std::string& process) {
  TimelineDocument doc;
  doc.name_process(pid, process);
  doc.name_track(pid, kStepsTrack, "steps");
  const std::vector<std::string>& axes = p.mesh.axis_names();
  double step_s = 0;
  int drawn = 0;
  for (int d = 0; d < int(p.local.size()) && drawn < max_devices; ++d) {
    if (p.local_of[d].empty()) continue;  // not lowered
    ++drawn;
    const Graph& g = p.local[d];
    std::vector<PredictedSpan> spans;
    const StepPrediction pred = predict(p, c, o, d, &spans);
    step_s = std::max(step_s, pred.step_s);
    const ProgramDescription program = describe_program(g, p.outputs[d], axes);
    // The buckets predict() placed on lane 1, in its order.
    const OverlapOptions& overlap = overlap_options();
    const std::vector<GradientBucket> buckets =
        overlap.enabled
            ? plan_gradient_buckets(g, plan_buffers(g, p.outputs[d]).schedule, overlap.bucket_bytes)
            : std::vector<GradientBucket>{};
    doc.name_track(pid, device_track(d), "device " + std::to_string(d));
    const std::string memory = "memory in use (device " + std::to_string(d) + ")";
    size_t bucket = 0;
    for (const PredictedSpan& s : spans) {
      const double ts = s.begin_s * 1e6, dur = s.seconds * 1e6;
      if (s.lane == 1) {
        if (bucket == 0) doc.name_track(pid, lane_track(d), lane_track_name(d));
        nlohmann::json args = bucket < buckets.size()
                                  ? bucket_args(g, buckets[bucket], axes, o.bf16)
                                  : nlohmann::json::object();
        args["predicted_us"] = dur;
        doc.slice(pid, lane_track(d), kBucketSliceName, "collective", ts, dur, args);
        ++bucket;
        continue;
      }
      const TimelineOp& op = program.ops[size_t(s.node)];
      nlohmann::json args = op.args;
      args["predicted_us"] = dur;
      doc.slice(pid, device_track(d), op.name, op.category, ts, dur, args);
      doc.counter(pid, memory, ts + dur, "bytes", program.live_bytes[size_t(s.node)]);
    }
  }
  doc.slice(pid, kStepsTrack, "predicted step", "step", 0, step_s * 1e6,
            {{"cluster", c.name}, {"step_s", step_s}, {"devices_drawn", drawn}});
  return doc;
}

}  // namespace autoshard
