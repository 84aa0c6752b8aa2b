#include "autoshard/nn/pipe_schedule.h"

#include <algorithm>

namespace autoshard {

namespace {

// The forward passes device d runs before its first backward pass.
int64_t warmup(const PipelineShape& s, int device) {
  const int64_t total = s.microbatches * s.virtual_stages, ahead = s.stages - device - 1;
  switch (s.schedule) {
    case PipelineSchedule::GPipe:
      return total;
    case PipelineSchedule::OneFOneB:
      return std::min(ahead, total);
    case PipelineSchedule::Interleaved:
      if (s.virtual_stages == 1) return std::min(ahead, total);
      return std::min(2 * ahead + int64_t{s.virtual_stages - 1} * s.stages, total);
  }
  return total;
}

// The i-th forward (or backward) pass of device d. Megatron-LM's order runs
// the micro-batches in groups of P through one chunk, then the next chunk
// (backward passes from the last chunk back).
PipeUnit unit(const PipelineShape& s, char kind, int64_t i, int device) {
  if (s.virtual_stages == 1) return {kind, device, i};
  const int64_t P = s.stages, v = s.virtual_stages;
  int64_t chunk = (i / P) % v;
  if (kind == 'B') chunk = v - 1 - chunk;
  return {kind, static_cast<int>(chunk * P + device), (i / (P * v)) * P + i % P};
}

}  // namespace

PipeWork pipe_schedule(const PipelineShape& s, int device) {
  const int64_t total = s.microbatches * s.virtual_stages, ahead = warmup(s, device);
  PipeWork work;
  for (int64_t i = 0; i < ahead; ++i) work.push_back(unit(s, 'F', i, device));
  for (int64_t i = 0; i < total - ahead; ++i) {
    work.push_back(unit(s, 'F', ahead + i, device));
    work.push_back(unit(s, 'B', i, device));
  }
  for (int64_t i = total - ahead; i < total; ++i) work.push_back(unit(s, 'B', i, device));
  return work;
}

}  // namespace autoshard
