// ShardedExecutor: runs a partitioned Graph on the devices of a mesh, each
// with its own local program, buffers and communicator: in-process devices
// (one thread each), or, under mpirun, this process's rank alone.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "autoshard/comm/thread_communicator.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/shard/partitioner.h"

namespace autoshard {

// Where a partitioned program runs when its mesh is part of the world's
// (a pipeline stage's ranks under mpirun): this process is device `device`
// of the mesh, and its collectives go through `comm`, a communicator the
// caller keeps, over `groups` (one per mesh axis, as mesh_groups orders
// them).
struct MeshPlacement {
  Communicator* comm = nullptr;
  std::vector<CommGroup> groups;
  int device = 0;
};

class ShardedExecutor {
 public:
  // `placement` (null: every device in-process, or the rank of a world of
  // the mesh's size under mpirun) is kept by the caller.
  ShardedExecutor(const Graph& graph, const DeviceMesh& mesh, const PartitionRequest& request,
                  const std::vector<int>& outputs, const MeshPlacement* placement = nullptr);
  ShardedExecutor(const Graph& graph, const DeviceMesh& mesh, const std::map<int, Sharding>& leaves,
                  const std::vector<int>& outputs)
      : ShardedExecutor(graph, mesh, PartitionRequest{leaves, {}}, outputs) {}
  const Partition& partition() const { return partition_; }
  const DeviceMesh& mesh() const { return partition_.mesh; }
  // The layout of a global leaf, and binding one device's block of it.
  const Sharding& layout(int global_id) const { return partition_.sharding[global_id]; }
  void bind(int device, int global_id, const Tensor& block);
  const std::vector<int>& devices() const { return devices_; }
  void run(const StepContext& ctx = {});
  // The k-th requested output, whole (every device holds the same).
  const Tensor& output(int k) const;
  void set_profile(OpProfile* profile) { profile_ = profile; }
  // Records every device's ops of the next runs (null: stop).
  void set_timeline(TimelineRecorder* timeline) { timeline_ = timeline; }
  // Intermediate buffer bytes of this process's devices together.
  size_t planned_bytes() const;

 private:
  std::vector<int> devices_;
  Partition partition_;
  std::unique_ptr<ThreadWorld> world_;  // in-process devices
  std::unique_ptr<Communicator> mpi_;   // this rank, under mpirun
  const MeshPlacement* placement_ = nullptr;
  std::vector<std::vector<CommGroup>> groups_;
  std::vector<std::unique_ptr<Executor>> executors_;
  OpProfile* profile_ = nullptr;
  TimelineRecorder* timeline_ = nullptr;
};

}  // namespace autoshard
