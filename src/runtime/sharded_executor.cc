#include "autoshard/sharded_executor.h"

#include <cblas.h>

#include <thread>

#include "autoshard/error.h"

namespace autoshard {

ShardedExecutor::ShardedExecutor(const Graph& graph, const DeviceMesh& mesh,
                                 const std::map<int, Sharding>& leaves, const std::vector<int>& outputs)
    : partition_(autoshard::partition(graph, mesh, leaves, outputs)), world_(mesh) {
  for (int d = 0; d < mesh.size(); ++d) {
    groups_.push_back(mesh_groups(mesh, d));
    executors_.push_back(std::make_unique<Executor>(partition_.local[d], partition_.outputs[d]));
  }
}

void ShardedExecutor::bind(int device, int global_id, const Tensor& block) {
  int local = partition_.local_of[device][global_id];
  check(local >= 0, "bind: value ", global_id, " is not used by the partitioned program");
  executors_[device]->bind(local, block);
}

void ShardedExecutor::run(const StepContext& ctx) {
  // Each device calls BLAS from its own thread; share the cores between them.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  openblas_set_num_threads(std::max(1, cores / mesh().size()));
  world_.run([&](int device, Communicator& comm) {
    Executor& e = *executors_[device];
    e.set_communicator(&comm, &groups_[device]);
    e.set_profile(device == 0 ? profile_ : nullptr);
    e.run(ctx);
  });
}

const Tensor& ShardedExecutor::output(int k) const {
  return executors_[0]->value(partition_.outputs[0][k]);
}

}  // namespace autoshard
