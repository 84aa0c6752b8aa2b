// Devices as MPI ranks (OpenMPI, started by mpirun or srun): one process per
// device, the same sharded program as in-process devices, with collectives
// over one MPI sub-communicator per mesh-axis group. Chosen automatically
// when the program runs under mpirun with more than one rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "autoshard/comm/communicator.h"
#include "autoshard/tensor/mesh.h"

namespace autoshard {

// The MPI side of World (world.h); use World rather than these.
bool launched_by_mpi();
int mpi_rank();
int mpi_size();
// The machines the ranks run on (ranks that share memory count as one).
int mpi_hosts();
[[noreturn]] void mpi_abort(const std::string& message);
void mpi_finalize();
void mpi_world_sum(float* data, int64_t count);
void mpi_world_barrier();
std::string mpi_broadcast_string(const std::string& value);
int64_t mpi_max_int64(int64_t value);

class MpiCommunicator : public Communicator {
 public:
  // Splits MPI_COMM_WORLD into the groups of every axis of `mesh`; the mesh
  // must have exactly as many devices as there are ranks.
  explicit MpiCommunicator(const DeviceMesh& mesh);
  ~MpiCommunicator() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) override;
  void all_gather(const float* in, float* out, const std::vector<int64_t>& counts,
                  const CommGroup& g) override;
  void reduce_scatter(const float* in, float* out, const std::vector<int64_t>& counts,
                      const CommGroup& g) override;
  void broadcast(float* data, int64_t count, int root, const CommGroup& g) override;
  void all_to_all(const float* in, const std::vector<int64_t>& send_counts, float* out,
                  const std::vector<int64_t>& recv_counts, const CommGroup& g) override;
  void barrier(const CommGroup& g) override;
  // MPI_Isend from a copy kept until the send completes (checked on every
  // later send and at the end), so a send never waits for its receiver.
  void send(const float* data, int64_t count, int dst, int tag) override;
  void recv(float* data, int64_t count, int src, int tag) override;
  // MPI_Iallreduce on a duplicate of the group's communicator (the async
  // lane), advanced by MPI_Testall between ops and waited with MPI_Waitall.
  int64_t start_all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) override;
  void wait_all_reduce(int64_t ticket) override;
  void progress_all_reduces() override;
  // Stops waiting for the started reductions (an MPI collective cannot be
  // cancelled): they are left to MPI and never waited for, even by the
  // destructor, since peers that failed may never join them. Returns false
  // while any was pending: its buffer must outlive the process's MPI use.
  bool abandon_all_reduces() noexcept override;
  // From the start call to the test or wait that saw it complete.
  std::pair<int64_t, int64_t> all_reduce_span(int64_t ticket) const override;

 private:
  struct Groups;
  struct Pending;     // sends not yet completed
  struct Reductions;  // started all-reduces and the async lane's communicators
  std::unique_ptr<Reductions> reductions_;
  std::unique_ptr<Groups> groups_;  // the MPI_Comm of each group id
  std::unique_ptr<Pending> pending_;
  int rank_ = 0, size_ = 1;
};

}  // namespace autoshard
