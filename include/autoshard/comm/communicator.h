// Communicator: the collectives that sharded programs run, on groups of
// devices (in practice the groups of a mesh axis). Variable-size collectives
// are first class: uneven shards give each member its own count.
//
// Two implementations share this interface: in-process threads over shared
// memory (thread_communicator.h) and MPI ranks (issue: beyond one machine).
// Every member of a group must call the same collectives in the same order.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/tensor/reduce_op.h"

namespace autoshard {

struct CommGroup {
  int id = 0;              // unique per group across the whole world
  std::vector<int> ranks;  // members in group order
  int index = 0;           // this rank's position in `ranks`
  int size() const { return static_cast<int>(ranks.size()); }
};


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
};

}  // namespace autoshard
