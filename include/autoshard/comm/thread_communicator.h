// In-process devices: one thread per device, collectives over shared memory.
// The device threads persist from the first run() to the world's end (the
// caller's own thread is device 0), so per-thread scratch survives steps.
// Members publish pointers to their buffers and read each other's directly
// (no copies into intermediate buffers, no locks in the data path), meeting
// at spin-then-sleep barriers built on C++20 atomic waits.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "autoshard/comm/communicator.h"
#include "autoshard/comm/lane_spans.h"
#include "autoshard/tensor/mesh.h"

namespace autoshard {

class ThreadWorld;
class OrderedWorker;

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadWorld& world, int rank);
  ~ThreadCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override;
  void all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) override;
  void all_gather(const float* in, float* out, const std::vector<int64_t>& counts,
                  const CommGroup& g) override;
  void reduce_scatter(const float* in, float* out, const std::vector<int64_t>& counts,
                      const CommGroup& g) override;
  void broadcast(float* data, int64_t count, int root, const CommGroup& g) override;
  void all_to_all(const float* in, const std::vector<int64_t>& send_counts, float* out,
                  const std::vector<int64_t>& recv_counts, const CommGroup& g) override;
  void barrier(const CommGroup& g) override;
  void send(const float* data, int64_t count, int dst, int tag) override;
  void recv(float* data, int64_t count, int src, int tag) override;
  // Reduced on this device's communication thread, on a copy of each group's
  // barrier state (the async lane), so blocking collectives of the device's
  // own thread may run meanwhile.
  int64_t start_all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) override;
  void wait_all_reduce(int64_t ticket) override;
  // Aborts the world (wakes the thread's collectives) and drains the thread.
  bool abandon_all_reduces() noexcept override;
  std::pair<int64_t, int64_t> all_reduce_span(int64_t ticket) const override {
    return lane_spans_.of(ticket);
  }

 private:
  ThreadWorld& world_;
  int rank_;
  LaneSpans lane_spans_;   // written by lane_'s jobs: declared first, destroyed after it
  int64_t lane_jobs_ = 0;  // jobs submitted to lane_ (its tickets count them)
  std::unique_ptr<OrderedWorker> lane_;  // started on the first reduction
  std::vector<float> scratch_;           // reused accumulation buffer
};

// The shared state of the in-process devices of one mesh.
class ThreadWorld {
 public:
  explicit ThreadWorld(const DeviceMesh& mesh);
  ~ThreadWorld();
  const DeviceMesh& mesh() const { return mesh_; }
  int size() const { return mesh_.size(); }
  // Runs body(rank, communicator) on every device (rank 0 on the calling
  // thread) and returns when all are done. If any rank throws, the others
  // are woken from their collectives and the first error is rethrown here,
  // naming the rank. One run at a time.
  void run(const std::function<void(int, Communicator&)>& body);

  struct GroupState;
  GroupState& group(const CommGroup& g);
  // The id of group `id`'s copy for reductions started on the async lane.
  int async_group_id(int id) const { return id + async_offset_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  void abort();

  // Point-to-point messages in flight, per (source, destination, tag).
  struct Mailboxes;
  Mailboxes& mailboxes() { return *mailboxes_; }

 private:
  struct Crew;
  void run_guarded(int rank, const std::function<void(int, Communicator&)>& body);

  DeviceMesh mesh_;
  std::vector<std::unique_ptr<ThreadCommunicator>> comms_;  // per rank
  std::unique_ptr<Crew> crew_;                              // threads of ranks 1..size-1
  std::mutex error_mu_;
  int failed_rank_ = -1;
  std::string first_error_;
  std::vector<std::unique_ptr<GroupState>> groups_;  // indexed by group id
  int async_offset_ = 0;  // groups_[id + async_offset_]: group id's async lane
  std::atomic<bool> aborted_{false};
  std::unique_ptr<Mailboxes> mailboxes_;
};

// Groups for every axis of `mesh` as seen from `rank` (index = axis), the
// whole world at index mesh.rank(), then those of mesh.collective_tuples().
std::vector<CommGroup> mesh_groups(const DeviceMesh& mesh, int rank);
// The group id that mesh_groups assigns to (axis, rank); the world's id is 0.
int mesh_group_id(const DeviceMesh& mesh, int axis, int rank);
// Group ids are below this.
int mesh_group_ids(const DeviceMesh& mesh);

}  // namespace autoshard
