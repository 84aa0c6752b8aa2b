// The cluster this process's own devices run on: apart from cluster.cc, which
// reads and prices clusters without knowing how the process was started.
#include "autoshard/comm/world.h"
#include "autoshard/plan/cluster.h"

namespace autoshard {

Cluster Cluster::for_this_run(const std::string& name_or_file, int hosts) {
  const Cluster c = named(name_or_file);
  const World& world = World::process();
  if (hosts > 0) return c.as_mpi_ranks(hosts);
  return world.distributed() ? c.as_mpi_ranks(world.hosts()) : c;
}

}  // namespace autoshard
