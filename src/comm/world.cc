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

int World::hosts() const {
  return distributed_ ? mpi_hosts() : 1;
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

namespace {

// Settings as one text: name, value, name, value, ... each ended by a NUL.
std::string serialize(const World::Settings& settings) {
  std::string text;
  for (const auto& [name, value] : settings) text += name + '\0' + value + '\0';
  return text;
}

World::Settings deserialize(const std::string& text) {
  World::Settings settings;
  size_t at = 0;
  while (at < text.size()) {
    const size_t a = text.find('\0', at), b = text.find('\0', a + 1);
    if (a == std::string::npos || b == std::string::npos) break;
    settings.emplace_back(text.substr(at, a - at), text.substr(a + 1, b - a - 1));
    at = b + 1;
  }
  return settings;
}

// FNV-1a, kept below 2^62 so that its negation fits the max-reduction.
int64_t hash_of(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) h = (h ^ c) * 1099511628211ull;
  return static_cast<int64_t>(h >> 2);
}

const std::string* find(const World::Settings& settings, const std::string& name) {
  for (const auto& [n, v] : settings)
    if (n == name) return &v;
  return nullptr;
}

// The first setting in which `mine` differs from the leader's, as a message.
std::string first_difference(const World::Settings& mine, const World::Settings& leader, int rank) {
  World::Settings names = mine;
  for (const auto& entry : leader)
    if (!find(mine, entry.first)) names.push_back(entry);
  for (const auto& [name, unused] : names) {
    const std::string* a = find(leader, name);
    const std::string* b = find(mine, name);
    if (a && b && *a == *b) continue;
    return cat("ranks disagree on ", name, ": rank 0 has ", a ? *a : "nothing", ", rank ", rank,
               " has ", b ? *b : "nothing",
               " (under mpirun every rank must be started with the same options and files)");
  }
  return cat("ranks disagree on their settings (rank 0 and rank ", rank,
             "); start every rank with the same options and files");
}

}  // namespace

void World::require_same_settings(const Settings& settings) const {
  if (!distributed_) return;
  const std::string text = serialize(settings);
  const int64_t h = hash_of(text);
  if (max(h) == -max(-h)) return;  // every rank holds the same hash
  const std::string leader = broadcast(text);
  const bool differs = text != leader;
  // The lowest rank that differs from the leader reports; every rank learns which.
  const int first = size() - static_cast<int>(max(differs ? size() - rank() : 0));
  if (rank() == first) throw Error(first_difference(settings, deserialize(leader), rank()));
  // Its error stops the job (main aborts every rank); wait for it here.
  barrier();
  fail("ranks disagree on their options (rank ", first, " reports which)");
}

void World::abort_all(const std::string& message) const {
  if (distributed_) mpi_abort(message);
}

void World::finalize() const {
  mpi_finalize();
}

}  // namespace autoshard
