#include "autoshard/comm/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "autoshard/comm/lane_spans.h"
#include "autoshard/comm/thread_communicator.h"
#include "autoshard/environment.h"
#include "autoshard/error.h"

namespace autoshard {

namespace {

int hosts_found = 1;

// Counted once, at start-up, where every rank is (counting later would be a
// collective some ranks might never reach): the first rank of each group
// that shares memory counts its machine.
int count_hosts() {
  MPI_Comm local;
  if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) !=
      MPI_SUCCESS)
    return 1;
  int local_rank = 0, first = 0, hosts = 1;
  MPI_Comm_rank(local, &local_rank);
  first = local_rank == 0;
  MPI_Allreduce(&first, &hosts, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Comm_free(&local);
  return std::max(1, hosts);
}

void ensure_init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  // Gradient buckets are MPI_Iallreduce calls of up to --bucket-mb MiB.
  // Open MPI's libnbc reduces those, below 4 ranks, to one rank and
  // broadcasts back: the link carries one direction at a time. Its ring
  // sends both ways at once (bench/overlap.sh, two ranks over a 1 Gbit/s
  // link: the bucketed GPT-2 step 10.4 s -> 6.2 s). Open MPI reads the
  // variable in MPI_Init; a user's setting is kept.
  ::setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0);
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  // Errors come back as codes we turn into exceptions naming the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  hosts_found = count_hosts();
}

void ok(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  fail(call, " failed on rank ", mpi_rank(), ": ", std::string(text, len));
}

// The most elements one MPI call moves. MPI counts and displacements are
// ints; larger transfers are split into rounds that stay under this limit.
// AUTOSHARD_MPI_MAX_COUNT lowers it (the tests use it to exercise the rounds
// on small tensors).
int64_t max_count() {
  static const int64_t limit = [] { return env::mpi_max_count().value_or(env::kMpiMaxCount); }();
  return limit;
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> o(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) o[i] = o[i - 1] + counts[i - 1];
  return o;
}

std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

// Round r of a split transfer moves elements [r * chunk, (r + 1) * chunk) of
// every member's piece. `chunk` keeps a whole round (members x chunk) under
// max_count(), so every count and displacement of a round fits an int.
struct Rounds {
  int64_t chunk = 1, count = 0;
  Rounds(const std::vector<int64_t>& pieces) {
    chunk = std::max<int64_t>(1, max_count() / std::max<int64_t>(1, int64_t(pieces.size())));
    int64_t longest = 0;
    for (int64_t p : pieces) longest = std::max(longest, p);
    count = (longest + chunk - 1) / chunk;
  }
  // Elements of a piece of `size` in round r.
  int window(int64_t size, int64_t r) const {
    return static_cast<int>(std::clamp<int64_t>(size - r * chunk, 0, chunk));
  }
};

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

int mpi_hosts() {
  ensure_init();
  return hosts_found;
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
  for (int64_t at = 0; at < count; at += max_count()) {
    const int n = static_cast<int>(std::min(max_count(), count - at));
    ok(MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
       "MPI_Allreduce");
  }
}

void mpi_world_barrier() {
  ensure_init();
  ok(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
}

int64_t mpi_max_int64(int64_t value) {
  ensure_init();
  int64_t out = 0;
  ok(MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce");
  return out;
}

std::string mpi_broadcast_string(const std::string& value) {
  ensure_init();
  int64_t n = static_cast<int64_t>(value.size());
  ok(MPI_Bcast(&n, 1, MPI_INT64_T, 0, MPI_COMM_WORLD), "MPI_Bcast");
  std::string out = mpi_rank() == 0 ? value : std::string(static_cast<size_t>(n), '\0');
  ok(MPI_Bcast(out.data(), static_cast<int>(n), MPI_CHAR, 0, MPI_COMM_WORLD), "MPI_Bcast");
  return out;
}

struct MpiCommunicator::Groups {
  std::map<int, MPI_Comm> comm;
};

// Buffered sends: each keeps its copy of the data and its requests (one per
// round of at most max_count() floats) until MPI says they completed.
struct MpiCommunicator::Pending {
  struct Send {
    std::vector<float> data;
    std::vector<MPI_Request> requests;
  };
  std::deque<Send> sends;

  // Frees the sends that completed (all of them when `wait`).
  void reap(bool wait) {
    for (auto it = sends.begin(); it != sends.end();) {
      int done = 1;
      const int n = static_cast<int>(it->requests.size());
      if (wait)
        ok(MPI_Waitall(n, it->requests.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      else
        ok(MPI_Testall(n, it->requests.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      it = done ? sends.erase(it) : std::next(it);
    }
  }
};

// Started all-reduces in start order: each ticket's requests (one per round
// of at most max_count() floats).
struct MpiCommunicator::Reductions {
  struct Started {
    int64_t ticket;
    std::vector<MPI_Request> requests;
    int64_t begin_ns = 0;
  };
  std::deque<Started> started;
  int64_t next_ticket = 0;
  LaneSpans spans;

  void completed(const Started& s) { spans.record(s.ticket, s.begin_ns, LaneSpans::now_ns()); }

  // Completes every reduction up to `ticket`, in order.
  void wait(int64_t ticket) {
    while (!started.empty() && started.front().ticket <= ticket) {
      std::vector<MPI_Request>& r = started.front().requests;
      ok(MPI_Waitall(static_cast<int>(r.size()), r.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
      completed(started.front());
      started.pop_front();
    }
  }
  // Tests the oldest reductions (each test also advances the later ones).
  void progress() {
    int done = 1;
    while (!started.empty() && done) {
      std::vector<MPI_Request>& r = started.front().requests;
      ok(MPI_Testall(static_cast<int>(r.size()), r.data(), &done, MPI_STATUSES_IGNORE),
         "MPI_Testall");
      if (done) {
        completed(started.front());
        started.pop_front();
      }
    }
  }
};

MpiCommunicator::MpiCommunicator(const DeviceMesh& mesh)
    : groups_(std::make_unique<Groups>()), pending_(std::make_unique<Pending>()) {
  ensure_init();
  rank_ = mpi_rank();
  size_ = mpi_size();
  AS_CHECK(mesh.size() == size_, "mesh ", mesh.to_string(), " has ", mesh.size(),
           " devices but mpirun started ", size_,
           " ranks; start as many ranks as the mesh has devices (mpirun -np ", mesh.size(), ")");
  MPI_Comm world;
  ok(MPI_Comm_dup(MPI_COMM_WORLD, &world), "MPI_Comm_dup");
  groups_->comm[0] = world;
  // Every rank splits once per grouped axis (mesh axes, then collective
  // tuples), so the calls match across ranks.
  for (const CommGroup& g : mesh_groups(mesh, rank_)) {
    if (g.id == 0) continue;  // the world
    MPI_Comm c;
    ok(MPI_Comm_split(world, g.id, g.index, &c), "MPI_Comm_split");
    groups_->comm[g.id] = c;
  }
  // The async lane of each group (start_all_reduce) is a duplicate of its
  // communicator, kept under key -1 - id: its non-blocking reductions then
  // never interleave with the group's blocking collectives.
  std::vector<int> ids;
  for (const auto& [id, c] : groups_->comm) ids.push_back(id);
  for (int id : ids) ok(MPI_Comm_dup(groups_->comm[id], &groups_->comm[-1 - id]), "MPI_Comm_dup");
  reductions_ = std::make_unique<Reductions>();
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  try {
    pending_->reap(/*wait=*/true);  // a send's copy lives until MPI is done with it
    if (reductions_) reductions_->wait(INT64_MAX);
  } catch (const Error&) {
  }
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
  for (int64_t at = 0; at < count; at += max_count()) {
    const int n = static_cast<int>(std::min(max_count(), count - at));
    ok(MPI_Allreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT, op == ReduceOp::Sum ? MPI_SUM : MPI_MAX,
                     c),
       "MPI_Allreduce");
  }
}

// All-gather and reduce-scatter exchange pieces pairwise (at step k a rank
// sends to rank + k and receives from rank - k), straight between the
// caller's buffers: on one machine this is 2-7x the bandwidth of OpenMPI's
// own MPI_Allgatherv and MPI_Reduce_scatter (bench/collectives_vs_mpi.sh).
// Pieces longer than an int count go in rounds.
void MpiCommunicator::all_gather(const float* in, float* out, const std::vector<int64_t>& counts,
                                 const CommGroup& g) {
  MPI_Comm c = lookup(groups_->comm, g);
  const int n = g.size(), me = g.index;
  const std::vector<int64_t> at = offsets_of(counts);
  if (counts[me] > 0 && out + at[me] != in)
    std::memmove(out + at[me], in, counts[me] * sizeof(float));
  const Rounds rounds(counts);
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    for (int64_t r = 0; r < rounds.count; ++r)
      ok(MPI_Sendrecv(out + at[me] + r * rounds.chunk, rounds.window(counts[me], r), MPI_FLOAT, to,
                      0, out + at[from] + r * rounds.chunk, rounds.window(counts[from], r),
                      MPI_FLOAT, from, 0, c, MPI_STATUS_IGNORE),
         "MPI_Sendrecv");
  }
}

// Each rank receives every other rank's copy of its own piece, then sums the
// copies in rank order, as the in-process devices do (the same bits).
void MpiCommunicator::reduce_scatter(const float* in, float* out,
                                     const std::vector<int64_t>& counts, const CommGroup& g) {
  MPI_Comm c = lookup(groups_->comm, g);
  const int n = g.size(), me = g.index;
  const std::vector<int64_t> at = offsets_of(counts);
  const int64_t mine = counts[me];
  thread_local std::vector<float> copies;  // [rank][mine], kept between calls
  copies.resize(static_cast<size_t>(mine * n));
  if (mine > 0) std::memcpy(copies.data() + me * mine, in + at[me], mine * sizeof(float));
  const Rounds rounds(counts);
  for (int k = 1; k < n; ++k) {
    const int to = (me + k) % n, from = (me - k + n) % n;
    for (int64_t r = 0; r < rounds.count; ++r)
      ok(MPI_Sendrecv(in + at[to] + r * rounds.chunk, rounds.window(counts[to], r), MPI_FLOAT, to,
                      0, copies.data() + from * mine + r * rounds.chunk, rounds.window(mine, r),
                      MPI_FLOAT, from, 0, c, MPI_STATUS_IGNORE),
         "MPI_Sendrecv");
  }
  for (int64_t e = 0; e < mine; ++e) {
    float sum = copies[e];
    for (int m = 1; m < n; ++m) sum += copies[m * mine + e];
    out[e] = sum;
  }
}

void MpiCommunicator::broadcast(float* data, int64_t count, int root, const CommGroup& g) {
  MPI_Comm c = lookup(groups_->comm, g);
  for (int64_t at = 0; at < count; at += max_count())
    ok(MPI_Bcast(data + at, static_cast<int>(std::min(max_count(), count - at)), MPI_FLOAT, root,
                 c),
       "MPI_Bcast");
}

void MpiCommunicator::all_to_all(const float* in, const std::vector<int64_t>& send_counts,
                                 float* out, const std::vector<int64_t>& recv_counts,
                                 const CommGroup& g) {
  MPI_Comm c = lookup(groups_->comm, g);
  const std::vector<int64_t> send_at = offsets_of(send_counts), recv_at = offsets_of(recv_counts);
  std::vector<int64_t> both = send_counts;
  both.insert(both.end(), recv_counts.begin(), recv_counts.end());
  const Rounds rounds(both);  // every rank computes the same rounds: counts agree pairwise
  int64_t local_rounds = rounds.count, all_rounds = 0;
  ok(MPI_Allreduce(&local_rounds, &all_rounds, 1, MPI_INT64_T, MPI_MAX, c), "MPI_Allreduce");
  std::vector<float> send, recv;
  for (int64_t r = 0; r < all_rounds; ++r) {
    std::vector<int> s, v;
    for (int64_t k : send_counts) s.push_back(rounds.window(k, r));
    for (int64_t k : recv_counts) v.push_back(rounds.window(k, r));
    const std::vector<int> sd = displacements(s), rd = displacements(v);
    send.resize(static_cast<size_t>(sd.back() + s.back()));
    recv.resize(static_cast<size_t>(rd.back() + v.back()));
    // Pieces this round leaves empty are not touched (their offsets may lie
    // past the piece, and an empty vector's data may be null).
    for (size_t m = 0; m < s.size(); ++m)
      if (s[m] > 0)
        std::memcpy(send.data() + sd[m], in + send_at[m] + r * rounds.chunk, s[m] * sizeof(float));
    ok(MPI_Alltoallv(send.data(), s.data(), sd.data(), MPI_FLOAT, recv.data(), v.data(), rd.data(),
                     MPI_FLOAT, c),
       "MPI_Alltoallv");
    for (size_t m = 0; m < v.size(); ++m)
      if (v[m] > 0)
        std::memcpy(out + recv_at[m] + r * rounds.chunk, recv.data() + rd[m], v[m] * sizeof(float));
  }
}

// Two members sum each element as a + b on one and b + a on the other: the
// same bits as MPI_Allreduce of any length. (With more members MPI may pick
// another summation order for another length; the in-process lane keeps
// member order always.)
int64_t MpiCommunicator::start_all_reduce(float* data, int64_t count, ReduceOp op,
                                          const CommGroup& g) {
  if (g.size() == 1) return 0;
  CommGroup lane = g;
  lane.id = -1 - g.id;
  MPI_Comm c = lookup(groups_->comm, lane);
  Reductions::Started& s = reductions_->started.emplace_back();
  s.ticket = ++reductions_->next_ticket;
  s.begin_ns = LaneSpans::now_ns();
  for (int64_t at = 0; at < count; at += max_count()) {
    const int n = static_cast<int>(std::min(max_count(), count - at));
    s.requests.emplace_back();
    ok(MPI_Iallreduce(MPI_IN_PLACE, data + at, n, MPI_FLOAT,
                      op == ReduceOp::Sum ? MPI_SUM : MPI_MAX, c, &s.requests.back()),
       "MPI_Iallreduce");
  }
  return s.ticket;
}

void MpiCommunicator::wait_all_reduce(int64_t ticket) {
  reductions_->wait(ticket);
}

void MpiCommunicator::progress_all_reduces() {
  reductions_->progress();
}

bool MpiCommunicator::abandon_all_reduces() noexcept {
  if (!reductions_ || reductions_->started.empty()) return true;
  // Their requests stay allocated for MPI (freeing an active collective's
  // request is erroneous); the process is on its way to MPI_Abort.
  static auto* abandoned = new std::deque<Reductions::Started>;
  for (auto& s : reductions_->started) abandoned->push_back(std::move(s));
  reductions_->started.clear();
  return false;
}

std::pair<int64_t, int64_t> MpiCommunicator::all_reduce_span(int64_t ticket) const {
  return reductions_->spans.of(ticket);
}

void MpiCommunicator::barrier(const CommGroup& g) {
  ok(MPI_Barrier(lookup(groups_->comm, g)), "MPI_Barrier");
}

namespace {
void check_rank(int peer, int size, int tag, const char* what) {
  AS_CHECK(peer >= 0 && peer < size, what, ": rank ", peer, " is not a rank of this world (", size,
           " ranks)");
  AS_CHECK(tag >= 0 && tag <= Communicator::kMaxTag, what, ": tag ", tag, " is outside 0..",
           Communicator::kMaxTag);
}
}  // namespace

// A message is sent as its length, then its rounds of at most max_count()
// floats, all with the same tag (MPI keeps their order between two ranks).
void MpiCommunicator::send(const float* data, int64_t count, int dst, int tag) {
  check_rank(dst, size_, tag, "send");
  AS_CHECK(count >= 0, "send: negative count ", count);
  MPI_Comm c = groups_->comm.at(0);
  pending_->reap(/*wait=*/false);
  Pending::Send& s = pending_->sends.emplace_back();
  s.data.resize(static_cast<size_t>(count) + 2);
  std::memcpy(s.data.data(), &count, sizeof count);  // the length rides in the first two floats
  if (count > 0) std::memcpy(s.data.data() + 2, data, count * sizeof(float));
  s.requests.emplace_back();
  ok(MPI_Isend(s.data.data(), 2, MPI_FLOAT, dst, tag, c, &s.requests.back()), "MPI_Isend");
  for (int64_t at = 0; at < count; at += max_count()) {
    s.requests.emplace_back();
    ok(MPI_Isend(s.data.data() + 2 + at, static_cast<int>(std::min(max_count(), count - at)),
                 MPI_FLOAT, dst, tag, c, &s.requests.back()),
       "MPI_Isend");
  }
}

void MpiCommunicator::recv(float* data, int64_t count, int src, int tag) {
  check_rank(src, size_, tag, "recv");
  MPI_Comm c = groups_->comm.at(0);
  float header[2];
  ok(MPI_Recv(header, 2, MPI_FLOAT, src, tag, c, MPI_STATUS_IGNORE), "MPI_Recv");
  int64_t sent = 0;
  std::memcpy(&sent, header, sizeof sent);
  // The rounds of a message of another length are still received (into a
  // scratch copy), so the next message with this tag starts in step.
  std::vector<float> scratch;
  float* into = data;
  if (sent != count) {
    scratch.resize(static_cast<size_t>(std::max<int64_t>(sent, 0)));
    into = scratch.data();
  }
  for (int64_t at = 0; at < sent; at += max_count())
    ok(MPI_Recv(into + at, static_cast<int>(std::min(max_count(), sent - at)), MPI_FLOAT, src, tag,
                c, MPI_STATUS_IGNORE),
       "MPI_Recv");
  AS_CHECK(sent == count, "recv: rank ", src, " sent ", sent, " floats with tag ", tag, " where ",
           count, " are expected");
}

}  // namespace autoshard
