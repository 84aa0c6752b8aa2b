// ShardedExecutor: runs a partitioned Graph on in-process devices, one thread
// per device, each with its own local program, buffers and communicator.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "autoshard/executor.h"
#include "autoshard/partitioner.h"
#include "autoshard/thread_communicator.h"

namespace autoshard {

class ShardedExecutor {
 public:
  ShardedExecutor(const Graph& graph, const DeviceMesh& mesh, const std::map<int, Sharding>& leaves,
                  const std::vector<int>& outputs);
  const Partition& partition() const { return partition_; }
  const DeviceMesh& mesh() const { return partition_.mesh; }
  // The layout of a global leaf, and binding one device's block of it.
  const Sharding& layout(int global_id) const { return partition_.sharding[global_id]; }
  void bind(int device, int global_id, const Tensor& block);
  void run(const StepContext& ctx = {});
  // The k-th requested output, whole (every device holds the same).
  const Tensor& output(int k) const;
  void set_profile(OpProfile* profile) { profile_ = profile; }

 private:
  Partition partition_;
  ThreadWorld world_;
  std::vector<std::vector<CommGroup>> groups_;
  std::vector<std::unique_ptr<Executor>> executors_;
  OpProfile* profile_ = nullptr;
};

}  // namespace autoshard
