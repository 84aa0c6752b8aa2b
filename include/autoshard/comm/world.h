// World: what this process is part of. By default the process runs every
// device of a mesh itself, as threads (in-process devices). Started by
// mpirun or srun with more than one rank, it is one device, its rank, of a
// world of processes. Code above the comm layer asks this one object instead
// of probing the environment.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/tensor/mesh.h"

namespace autoshard {

class World {
 public:
  // The process's world, found once from the environment that mpirun/srun
  // set (MPI itself starts on first use).
  static const World& process();

  bool distributed() const { return distributed_; }
  int rank() const;  // 0 when not distributed
  int size() const;  // 1 when not distributed
  int hosts() const;  // machines the ranks run on; 1 when not distributed
  // Rank 0 prints, logs, and creates, renames and prunes shared files.
  bool leader() const { return rank() == 0; }

  // The devices of `mesh` this process runs: all of them in-process, its own
  // rank under mpirun. Throws (the same error on every rank) when the mesh
  // cannot run here: more in-process devices than allowed, or a mesh whose
  // device count differs from the ranks started.
  std::vector<int> local_devices(const DeviceMesh& mesh) const;

  // Collective helpers over every rank; no-ops when not distributed.
  void barrier() const;
  void sum(float* data, int64_t count) const;
  // The largest of every rank's `value`.
  int64_t max(int64_t value) const;
  // The leader's `value` on every rank.
  std::string broadcast(const std::string& value) const;

  // A run's settings as named values, e.g. {"--steps", "50"}.
  using Settings = std::vector<std::pair<std::string, std::string>>;
  // Checks that every rank was given the same `settings` (a collective: all
  // ranks call it at the same point). A fixed-size comparison of their hash
  // first; on a difference, the first rank that differs from the leader
  // throws an error naming the setting and both values (the others wait
  // for that error to stop the job), so ranks that disagree stop at start
  // instead of hanging in a collective or training different replicas.
  void require_same_settings(const Settings& settings) const;

  // Stops every rank with a message naming this one (distributed), or
  // returns (in-process: the caller reports and exits).
  void abort_all(const std::string& message) const;
  // Shuts MPI down if it was started (call before a normal exit).
  void finalize() const;

 private:
  World();
  bool distributed_ = false;
};

}  // namespace autoshard
