// Communicator: the collectives that sharded programs run, on groups of
// devices (in practice the groups of a mesh axis). Variable-size collectives
// are first class: uneven shards give each member its own count.
//
// Two implementations share this interface: in-process threads over shared
// memory (thread_communicator.h) and MPI ranks (issue: beyond one machine).
// Every member of a group must call the same collectives in the same order.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "autoshard/tensor/reduce_op.h"

namespace autoshard {

struct CommGroup {
  int id = 0;              // unique per group across the whole world
  std::vector<int> ranks;  // members in group order
  int index = 0;           // this rank's position in `ranks`
  int axis = -1;           // the mesh axis id it is the group of (-1: the world)
  int size() const { return static_cast<int>(ranks.size()); }
};

// The group of mesh axis id `axis` among a device's groups (mesh_groups):
// null when there is none.
inline const CommGroup* group_of_axis(const std::vector<CommGroup>& groups, int axis) {
  if (axis >= 0 && axis < int(groups.size()) && groups[size_t(axis)].axis == axis)
    return &groups[size_t(axis)];
  for (const CommGroup& g : groups)  // a tuple's
    if (g.axis == axis && axis >= 0) return &g;
  return nullptr;
}

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every member ends with the elementwise reduction. Every member
  // gets bitwise the same result.
  virtual void all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) = 0;
  // `in` holds counts[g.index] floats; `out` gets all members' pieces
  // concatenated in group order.
  virtual void all_gather(const float* in, float* out, const std::vector<int64_t>& counts,
                          const CommGroup& g) = 0;
  // `in` holds every member's piece concatenated (counts); `out` gets the sum
  // over members of piece g.index.
  virtual void reduce_scatter(const float* in, float* out, const std::vector<int64_t>& counts,
                              const CommGroup& g) = 0;
  // Copies member `root`'s data to every member.
  virtual void broadcast(float* data, int64_t count, int root, const CommGroup& g) = 0;
  // `in` holds send_counts[j] floats for each member j, in order; `out` gets
  // recv_counts[j] floats from each member j, in order.
  virtual void all_to_all(const float* in, const std::vector<int64_t>& send_counts, float* out,
                          const std::vector<int64_t>& recv_counts, const CommGroup& g) = 0;
  virtual void barrier(const CommGroup& g) = 0;

  // Point to point between two world ranks (pipeline stages pass a
  // micro-batch's activations forward and their gradients back). Messages
  // from one rank to another with one tag arrive in the order sent. send()
  // is buffered: it returns once `data` may be reused, never waiting for the
  // receiver, so any order of sends and receives that does not wait on a
  // message never sent completes. recv() waits for the next message from
  // `src` with `tag`; its length must be `count` (else an error naming both).
  // Tags are 0 .. kMaxTag.
  static constexpr int kMaxTag = 32767;
  virtual void send(const float* data, int64_t count, int dst, int tag) = 0;
  virtual void recv(float* data, int64_t count, int src, int tag) = 0;

  // Non-blocking all-reduce (gradient buckets, runtime/overlap.h): starts
  // reducing `data` in place and returns a ticket; `data` must stay
  // untouched until wait_all_reduce(ticket) returns. Started reductions run
  // in start order on a lane of their own, apart from the blocking
  // collectives above, so members must start the same reductions in the
  // same order (and may call blocking collectives in between). The result is
  // bitwise that of all_reduce(). This default runs all_reduce() at once.
  virtual int64_t start_all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) {
    all_reduce(data, count, op, g);
    return 0;
  }
  // Waits for the reduction of `ticket` and every one started before it;
  // rethrows its error.
  virtual void wait_all_reduce(int64_t ticket) { (void)ticket; }
  // Lets started reductions advance (MPI moves a non-blocking collective
  // only inside MPI calls); the executor calls it between ops while any is
  // pending. Cheap: it never waits.
  virtual void progress_all_reduces() {}
  // After an error mid-step: stops or finishes every started reduction, so
  // that their buffers may be reused; false when some may still write into
  // theirs (MPI cannot cancel a collective: the caller must then keep the
  // buffers alive). Never throws.
  virtual bool abandon_all_reduces() noexcept { return true; }
  // When reduction `ticket` ran (steady_clock nanoseconds), once
  // wait_all_reduce(ticket) has returned: for timelines (runtime/timeline.h).
  // {0, 0} where it is not known (this default: nothing runs apart).
  virtual std::pair<int64_t, int64_t> all_reduce_span(int64_t ticket) const {
    (void)ticket;
    return {0, 0};
  }
};

}  // namespace autoshard
