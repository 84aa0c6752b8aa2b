#include "autoshard/runtime/sharded_executor.h"

#include <cblas.h>

#include <cstdlib>

#include "autoshard/comm/mpi_communicator.h"
#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/tensor/parallel.h"

namespace autoshard {

namespace {
std::vector<int> devices_of(const DeviceMesh& mesh, const MeshPlacement* placement) {
  if (placement) return {placement->device};
  return World::process().local_devices(mesh);
}
}  // namespace

ShardedExecutor::ShardedExecutor(const Graph& graph, const DeviceMesh& mesh,
                                 const PartitionRequest& request, const std::vector<int>& outputs,
                                 const MeshPlacement* placement)
    : devices_(devices_of(mesh, placement)),
      partition_(autoshard::partition(graph, mesh, request, outputs, devices_)),
      placement_(placement) {
  if (placement)
    AS_CHECK(placement->comm && int(placement->groups.size()) >= mesh.rank(),
             "internal: a placement without a communicator or a group per axis");
  else if (World::process().distributed())
    mpi_ = std::make_unique<MpiCommunicator>(mesh);
  else
    world_ = std::make_unique<ThreadWorld>(mesh);
  executors_.resize(mesh.size());
  for (int d = 0; d < mesh.size(); ++d)
    groups_.push_back(placement && d == placement->device ? placement->groups
                                                          : mesh_groups(mesh, d));
  const OverlapOptions& overlap = overlap_options();
  for (int d : devices_) {
    executors_[d] = std::make_unique<Executor>(partition_.local[d], partition_.outputs[d]);
    executors_[d]->set_overlap(overlap.enabled ? overlap.bucket_bytes : 0);
  }
}

void ShardedExecutor::bind(int device, int global_id, const Tensor& block) {
  AS_CHECK(executors_[device] != nullptr, "bind: device ", device, " runs in another process");
  int local = partition_.local_of[device][global_id];
  AS_CHECK(local >= 0, "bind: value ", global_id, " is not used by the partitioned program");
  executors_[device]->bind(local, block);
}

void ShardedExecutor::run(const StepContext& ctx) {
  const int cores = machine_cores();
  if (mpi_ || placement_) {
    // Share this machine's cores between the ranks running on it.
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int share = std::max(1, cores / std::max(1, local ? std::atoi(local) : 1));
    set_intra_op_threads(share);
    Executor& e = *executors_[devices_[0]];
    e.set_communicator(placement_ ? placement_->comm : mpi_.get(), &groups_[devices_[0]]);
    e.set_profile(profile_);
    e.set_timeline(timeline_, devices_[0], &mesh().axis_names());
    e.run(ctx);
    return;
  }
  // Each device runs its kernels (BLAS included: ir/ops/gemm.h) on its share
  // of the caller's cores (all of them, or a pipeline stage's share).
  const int share = std::max(1, intra_op_threads() / mesh().size());
  world_->run([&](int device, Communicator& comm) {
    IntraOpThreadsScope cores_of_this_device(share);
    Executor& e = *executors_[device];
    e.set_communicator(&comm, &groups_[device]);
    e.set_profile(device == 0 ? profile_ : nullptr);
    e.set_timeline(timeline_, device, &mesh().axis_names());
    e.run(ctx);
  });
}

size_t ShardedExecutor::planned_bytes() const {
  size_t total = 0;
  for (int d : devices_) total += executors_[d]->planned_bytes();
  return total;
}

const Tensor& ShardedExecutor::output(int k) const {
  return executors_[devices_[0]]->value(partition_.outputs[devices_[0]][k]);
}

}  // namespace autoshard
