#include "autoshard/comm/world.h"

#include "autoshard/comm/mpi_communicator.h"
#include "autoshard/error.h"

namespace autoshard {

World::World() : distributed_(launched_by_mpi()) {}

const World& World::process() {
  static const World world;
  return world;
}

int World::rank() const {
  return distributed_ ? mpi_rank() : 0;
}

int World::size() const {
  return distributed_ ? mpi_size() : 1;
}

std::vector<int> World::local_devices(const DeviceMesh& mesh) const {
  if (distributed_) {
    AS_CHECK(mesh.size() == size(), "mesh ", mesh.to_string(), " has ", mesh.size(),
             " devices but mpirun started ", size(),
             " ranks; start as many ranks as the mesh has devices (mpirun -np ", mesh.size(), ")");
    return {rank()};
  }
  AS_CHECK(mesh.size() <= kMaxInProcessDevices, "mesh ", mesh.to_string(), " has ", mesh.size(),
           " devices; one process runs at most ", kMaxInProcessDevices,
           " in-process devices (use mpirun for more, or 'autoshard plan' to predict)");
  std::vector<int> all;
  for (int d = 0; d < mesh.size(); ++d) all.push_back(d);
  return all;
}

void World::barrier() const {
  if (distributed_) mpi_world_barrier();
}

void World::sum(float* data, int64_t count) const {
  if (distributed_) mpi_world_sum(data, count);
}

int64_t World::max(int64_t value) const {
  return distributed_ ? mpi_max_int64(value) : value;
}

std::string World::broadcast(const std::string& value) const {
  return distributed_ ? mpi_broadcast_string(value) : value;
}

void World::abort_all(const std::string& message) const {
  if (distributed_) mpi_abort(message);
}

void World::finalize() const {
  mpi_finalize();
}

}  // namespace autoshard
