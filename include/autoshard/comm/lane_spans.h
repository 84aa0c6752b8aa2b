// LaneSpans: when each of the last reductions started on a communicator's
// async lane (Communicator::start_all_reduce) ran, by ticket, so a timeline
// (runtime/timeline.h) can draw the communication thread. A fixed ring: memory
// stays bounded however long a run goes untraced.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <utility>

namespace autoshard {

class LaneSpans {
 public:
  // steady_clock nanoseconds, the clock of runtime/timeline.h.
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Thread-safe.
  void record(int64_t ticket, int64_t begin_ns, int64_t end_ns) {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[size_t(ticket % kSlots)] = {ticket, begin_ns, end_ns};
  }
  // {begin, end} of `ticket`, or {0, 0} when it is not (or no longer) known.
  std::pair<int64_t, int64_t> of(int64_t ticket) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Slot& s = slots_[size_t(ticket % kSlots)];
    if (ticket <= 0 || s.ticket != ticket) return {0, 0};
    return {s.begin, s.end};
  }

 private:
  static constexpr int64_t kSlots = 1024;
  struct Slot {
    int64_t ticket = 0, begin = 0, end = 0;
  };
  mutable std::mutex mu_;
  std::array<Slot, kSlots> slots_{};
};

}  // namespace autoshard
