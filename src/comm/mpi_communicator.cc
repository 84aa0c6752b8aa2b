#include "autoshard/mpi_communicator.h"

#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/thread_communicator.h"

namespace autoshard {

namespace {

void ensure_init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as codes we turn into exceptions naming the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

void ok(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail(call, " failed on rank ", mpi_rank(), ": ", std::string(text, len));
}

std::vector<int> to_int(const std::vector<int64_t>& v, const char* what) {
  std::vector<int> out;
  for (int64_t x : v) {
    AS_CHECK(x <= INT_MAX, what, ": a piece of ", x, " floats exceeds MPI's int counts");
    out.push_back(static_cast<int>(x));
  }
  return out;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    const char* v = std::getenv(var);
    if (v && std::atoi(v) > 1)
      return var != std::string("SLURM_NTASKS") || std::getenv("SLURM_PROCID");
  }
  return false;
}

int mpi_rank() {
  ensure_init();
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int mpi_size() {
  ensure_init();
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

void mpi_abort(const std::string& message) {
  std::fprintf(stderr, "autoshard: error on rank %d: %s\n", mpi_rank(), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::exit(1);
}

void mpi_finalize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Finalize();
}

void mpi_world_sum(float* data, int64_t count) {
  ensure_init();
  for (int64_t at = 0; at < count; at += INT_MAX / 2) {
    const int n = static_cast<int>(std::min<int64_t>(INT_MAX / 2, count - at));
    ok(MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
       "MPI_Allreduce");
  }
}

void mpi_world_barrier() {
  ensure_init();
  ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

struct MpiCommunicator::Groups {
  std::map<int, MPI_Comm> comm;
};

MpiCommunicator::MpiCommunicator(const DeviceMesh& mesh) : groups_(std::make_unique<Groups>()) {
  ensure_init();
  rank_ = mpi_rank();
  size_ = mpi_size();
  AS_CHECK(mesh.size() == size_, "mesh ", mesh.to_string(), " has ", mesh.size(),
        " devices but mpirun started ", size_,
        " ranks; start as many ranks as the mesh has devices (mpirun -np ", mesh.size(), ")");
  MPI_Comm world;
  ok(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  groups_->comm[0] = world;
  // Every rank splits once per axis, so the calls match across ranks.
  for (int a = 0; a < mesh.rank(); ++a) {
    const int id = mesh_group_id(mesh, a, rank_);
    MPI_Comm c;
    ok(MPI_Comm_split(world, id, mesh.coordinates(rank_)[a], &c), "MPI_Comm_split");
    groups_->comm[id] = c;
  }
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& [id, c] : groups_->comm) MPI_Comm_free(&c);
}

namespace {
MPI_Comm lookup(const std::map<int, MPI_Comm>& m, const CommGroup& g) {
  auto it = m.find(g.id);
  AS_CHECK(it != m.end(), "internal: no MPI communicator for group ", g.id);
  return it->second;
}
}  // namespace

void MpiCommunicator::all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) {
  if (g.size() == 1) return;
  MPI_Comm c = lookup(groups_->comm, g);
  for (int64_t at = 0; at < count; at += INT_MAX / 2) {
    const int n = static_cast<int>(std::min<int64_t>(INT_MAX / 2, count - at));
    ok(MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, op == ReduceOp::Sum ? MPI_SUM : MPI_MAX,
                     c),
       "MPI_Allreduce");
  }
}

void MpiCommunicator::all_gather(const float* in, float* out, const std::vector<int64_t>& counts,
                                 const CommGroup& g) {
  const std::vector<int> n = to_int(counts, "all_gather");
  const std::vector<int> d = displacements(n);
  ok(MPI_Allgatherv(in, n[g.index], MPI_FLOAT, out, n.data(), d.data(), MPI_FLOAT,
                    lookup(groups_->comm, g)),
     "MPI_Allgatherv");
}

void MpiCommunicator::reduce_scatter(const float* in, float* out,
                                     const std::vector<int64_t>& counts, const CommGroup& g) {
  const std::vector<int> n = to_int(counts, "reduce_scatter");
  int64_t total = 0;
  for (int x : n) total += x;
  std::vector<float> copy;
  if (out < in + total && out + counts[g.index] > in) {  // MPI forbids aliasing here
    copy.assign(in, in + total);
    in = copy.data();
  }
  ok(MPI_Reduce_scatter(in, out, n.data(), MPI_FLOAT, MPI_SUM, lookup(groups_->comm, g)),
     "MPI_Reduce_scatter");
}

void MpiCommunicator::broadcast(float* data, int64_t count, int root, const CommGroup& g) {
  ok(MPI_Bcast(data, static_cast<int>(count), MPI_FLOAT, root, lookup(groups_->comm, g)),
     "MPI_Bcast");
}

void MpiCommunicator::all_to_all(const float* in, const std::vector<int64_t>& send_counts,
                                 float* out, const std::vector<int64_t>& recv_counts,
                                 const CommGroup& g) {
  const std::vector<int> s = to_int(send_counts, "all_to_all"),
                         r = to_int(recv_counts, "all_to_all");
  const std::vector<int> sd = displacements(s), rd = displacements(r);
  ok(MPI_Alltoallv(in, s.data(), sd.data(), MPI_FLOAT, out, r.data(), rd.data(), MPI_FLOAT,
                   lookup(groups_->comm, g)),
     "MPI_Alltoallv");
}

void MpiCommunicator::barrier(const CommGroup& g) {
  ok(MPI_Barrier(lookup(groups_->comm, g)), "MPI_Barrier");
}

}  // namespace autoshard
