// The cost model's schedule of one step as a timeline for Perfetto (the
// Chrome Trace Event Format of runtime/timeline_events.h), with the tracks and
// slice names of a measured step (runtime/timeline.h, runtime/timeline_ops.h), so
// a prediction and a measurement of the same plan open side by side:
//
//   autoshard plan --model gpt2 --mesh data=2 --predict --trace predicted.json
//   autoshard train --model gpt2 --mesh data=2 --steps 3 --trace measured.json
//
// One track per device holds its ops and blocking collectives where
// predict() places them; gradient buckets (runtime/overlap.h) run on a
// second track per device, and the "steps" track holds one slice as long
// as the predicted step. Memory in use is a counter, as in a measured trace.
#pragma once

#include "autoshard/plan/cost_model.h"
#include "autoshard/runtime/timeline_events.h"

namespace autoshard {

// The predicted step of `p` on cluster `c` for its first `max_devices`
// lowered devices (a mesh of thousands draws a readable few), as process
// `pid` named `process`. The "steps" slice is as long as the slowest
// device's prediction; each device's latest span ends at its step_s.
TimelineDocument predicted_timeline(const Partition& p, const Cluster& c, const PredictOptions& o,
                                    int max_devices = 64, int pid = 0,
                                    const std::string& process = "autoshard prediction");

}  // namespace autoshard
