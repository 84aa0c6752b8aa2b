// The order in which a pipeline's devices run the forward and backward
// passes of a step's micro-batches: GPipe, 1F1B and interleaved 1F1B
// (Narayanan et al. 2021: each device holds `chunks` stages, device d the
// stages d, d + P, d + 2P, ..., so a micro-batch visits every device
// `chunks` times and the bubble shrinks by that factor).
//
// Every order is one that buffered sends and blocking receives complete:
// a forward pass of stage j needs stage j - 1's of the same micro-batch, a
// backward pass stage j + 1's, and each device's list is consistent with
// some global order of all of them (tests/pipeline_test.cc simulates it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace autoshard {

enum class PipeSchedule {
  GPipe,        // every micro-batch's forward pass, then every backward pass
  OneFOneB,     // after a warm-up, one forward and one backward pass in turn
  Interleaved,  // 1F1B over several stages per device (Megatron-LM's order)
};
const char* pipe_schedule_name(PipeSchedule s);
// "gpipe", "1f1b" or "interleaved"; anything else is an error naming them.
PipeSchedule parse_pipe_schedule(const std::string& name);

// One pass: 'F' or 'B', of (virtual) stage `stage`, for one micro-batch.
struct PipeUnit {
  char kind;
  int stage;
  int64_t microbatch;
  bool operator==(const PipeUnit&) const = default;
};
using PipeWork = std::vector<PipeUnit>;

// Throws a one-line error unless the shape can be scheduled: at least one
// device and micro-batch; `chunks` > 1 only interleaved, which needs it > 1
// and the micro-batches a multiple of the devices.
void check_pipe_shape(PipeSchedule s, int devices, int chunks, int64_t microbatches);
// Device `device`'s passes of one step, in order.
PipeWork pipe_schedule(PipeSchedule s, int devices, int chunks, int64_t microbatches, int device);
// The most passes whose forward ran and backward did not that the device
// holds at once: M for GPipe, min(P - d, M) for 1F1B, and interleaved
// min(M v, 2 (P - d - 1) + (v - 1) P + 1).
int64_t pipe_in_flight_bound(PipeSchedule s, int devices, int chunks, int64_t microbatches,
                             int device);

}  // namespace autoshard
