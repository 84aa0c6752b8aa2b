// The order in which a pipeline's devices run the forward and backward
// passes of a step's micro-batches, for the schedules the cost model prices
// (plan/pipeline.h): GPipe, 1F1B and interleaved 1F1B (Narayanan et al.
// 2021: each device holds v stages, device d the stages d, d + P, d + 2P,
// ..., so a micro-batch visits every device v times and the bubble shrinks
// by that factor).
//
// Every order is one that buffered sends and blocking receives complete:
// a forward pass of stage j needs stage j - 1's of the same micro-batch, a
// backward pass stage j + 1's, and each device's list is consistent with
// some global order of all of them (tests/pipeline_test.cc simulates it).
// The passes a device holds between forward and backward never exceed
// in_flight(shape, d) x v, the cost model's count.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/plan/pipeline.h"
#include "autoshard/runtime/pipeline_stages.h"  // PipeUnit, PipeWork

namespace autoshard {

// Device `device`'s passes of one step, in order (`s` as
// check_pipeline_shape accepts it; interleaved with v = 1 is 1F1B).
PipeWork pipe_schedule(const PipelineShape& s, int device);

}  // namespace autoshard
