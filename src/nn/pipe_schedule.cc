#include "autoshard/nn/pipe_schedule.h"

#include <algorithm>

#include "autoshard/error.h"

namespace autoshard {

const char* pipe_schedule_name(PipeSchedule s) {
  switch (s) {
    case PipeSchedule::GPipe:
      return "gpipe";
    case PipeSchedule::OneFOneB:
      return "1f1b";
    case PipeSchedule::Interleaved:
      return "interleaved";
  }
  return "?";
}

PipeSchedule parse_pipe_schedule(const std::string& name) {
  for (PipeSchedule s : {PipeSchedule::GPipe, PipeSchedule::OneFOneB, PipeSchedule::Interleaved})
    if (name == pipe_schedule_name(s)) return s;
  fail("unknown pipeline schedule '", name, "': use gpipe, 1f1b or interleaved");
}

void check_pipe_shape(PipeSchedule s, int devices, int chunks, int64_t microbatches) {
  AS_CHECK(devices >= 1 && microbatches >= 1, "pipeline: need a device and a micro-batch, got ",
           devices, " and ", microbatches);
  if (s != PipeSchedule::Interleaved) {
    AS_CHECK(chunks == 1, "pipeline: ", chunks,
             " virtual stages per device need the interleaved schedule");
    return;
  }
  AS_CHECK(chunks >= 2,
           "pipeline: the interleaved schedule needs at least 2 virtual stages per "
           "device, got ",
           chunks);
  AS_CHECK(microbatches % devices == 0,
           "pipeline: the interleaved schedule needs the "
           "micro-batches (",
           microbatches, ") to be a multiple of the pipe size (", devices, ")");
}

namespace {

// The number of passes of each kind device d runs before its first backward
// pass.
int64_t warmup(PipeSchedule s, int devices, int chunks, int64_t microbatches, int device) {
  const int64_t total = microbatches * chunks;
  switch (s) {
    case PipeSchedule::GPipe:
      return total;
    case PipeSchedule::OneFOneB:
      return std::min<int64_t>(devices - device - 1, total);
    case PipeSchedule::Interleaved:
      return std::min<int64_t>(int64_t{2} * (devices - device - 1) + int64_t{chunks - 1} * devices,
                               total);
  }
  return total;
}

// The i-th forward (or backward) pass of device d: Megatron-LM's order runs
// the micro-batches in groups of P through one chunk, then the next chunk
// (backward passes from the last chunk back).
PipeUnit unit(char kind, int64_t i, int devices, int chunks, int device) {
  const int64_t group = int64_t{devices} * chunks;
  int chunk = static_cast<int>((i / devices) % chunks);
  if (kind == 'B') chunk = chunks - 1 - chunk;
  return {kind, chunk * devices + device, (i / group) * devices + i % devices};
}

}  // namespace

PipeWork pipe_schedule(PipeSchedule s, int devices, int chunks, int64_t microbatches, int device) {
  check_pipe_shape(s, devices, chunks, microbatches);
  const int64_t total = microbatches * chunks;
  auto at = [&](char kind, int64_t i) {
    return chunks == 1 ? PipeUnit{kind, device, i} : unit(kind, i, devices, chunks, device);
  };
  const int64_t ahead = warmup(s, devices, chunks, microbatches, device);
  PipeWork work;
  for (int64_t i = 0; i < ahead; ++i) work.push_back(at('F', i));
  for (int64_t i = 0; i < total - ahead; ++i) {
    work.push_back(at('F', ahead + i));
    work.push_back(at('B', i));
  }
  for (int64_t i = total - ahead; i < total; ++i) work.push_back(at('B', i));
  return work;
}

int64_t pipe_in_flight_bound(PipeSchedule s, int devices, int chunks, int64_t microbatches,
                             int device) {
  const int64_t total = microbatches * chunks;
  return std::min(total, warmup(s, devices, chunks, microbatches, device) + 1);
}

}  // namespace autoshard
