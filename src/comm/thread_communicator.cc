#include "autoshard/comm/thread_communicator.h"

#include <immintrin.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/tensor/array_split.h"
#include "comm/ordered_worker.h"
#include "tensor/vec16.h"

namespace autoshard {

namespace {
constexpr int kMaxAxes = 8;
constexpr const char* kStopped = "stopped: another device failed";

inline void cpu_relax() {
#if defined(__x86_64__)
  __builtin_ia32_pause();
#endif
}
}  // namespace

// Per group: the pointers members publish, and a reusable barrier that spins
// briefly when every device has a core of its own and then sleeps on its
// state word. When devices outnumber the cores it sleeps at once: a spinning
// member holds the core that the member it waits for needs (spinning made a
// step of 3 or 4 devices on 2 cores 10-20% slower).
//
// The state word holds the barrier's generation and, in its top bit, whether
// the world was aborted. A member reads both in one atomic load on entry and
// sleeps only while the word is unchanged; an abort sets the bit and wakes
// every sleeper. So there is no moment between "not aborted" and "sleep" in
// which an abort can slip by unseen.
//
// Between two waits of a collective, members read each other's buffers. A
// member that leaves a collective because of an abort frees its buffers as
// it unwinds, so before it throws it waits until no member is reading. A
// member announces that it will read *before* it arrives at a wait: a member
// that sees the barrier complete (and then the abort) therefore always sees
// the flag of every member that may read its buffers after that barrier.
struct ThreadWorld::GroupState {
  static constexpr uint32_t kAbortBit = 1u << 31;

  GroupState(int members, int spins)
      : n(members),
        spin_limit(spins),
        in(members),
        out(members),
        counts(members),
        reading(members) {}
  const int n;
  const int spin_limit;          // polls of the state word before sleeping on it
  std::vector<const float*> in;  // written before a barrier, read after it
  std::vector<float*> out;
  std::vector<const int64_t*> counts;
  std::vector<std::atomic<bool>> reading;  // per member: may read others' buffers after this wait
  std::atomic<int> arrived{0};
  std::atomic<uint32_t> state{0};

  // Member `me` waits for every member. `last`: the collective's final wait,
  // after which nobody reads another member's buffers.
  void wait(int me, bool last) {
    // Announce only a change: the store is a full fence, the load is free.
    if (reading[me].load(std::memory_order_relaxed) != !last)
      reading[me].store(!last, std::memory_order_seq_cst);
    const uint32_t seen = state.load(std::memory_order_seq_cst);
    if (seen & kAbortBit) stop(me);
    if (arrived.fetch_add(1, std::memory_order_acq_rel) == n - 1) {
      arrived.store(0, std::memory_order_relaxed);
      advance();
      return;
    }
    uint32_t now = seen;
    for (int spin = 0; spin < spin_limit && (now = state.load(std::memory_order_acquire)) == seen;
         ++spin)
      cpu_relax();
    while (now == seen) {
      state.wait(seen, std::memory_order_acquire);
      now = state.load(std::memory_order_acquire);
    }
    if (now & kAbortBit) stop(me);
  }

  // Leaves a collective after an abort, once no other member reads any buffer.
  [[noreturn]] void stop(int me) {
    reading[me].store(false, std::memory_order_seq_cst);
    for (int m = 0; m < n; ++m)
      while (reading[m].load(std::memory_order_seq_cst)) std::this_thread::yield();
    throw Error(kStopped);
  }

  // Next generation, keeping the abort bit as it is.
  void advance() {
    uint32_t s = state.load(std::memory_order_relaxed);
    while (!state.compare_exchange_weak(s, (s & kAbortBit) | ((s + 1) & ~kAbortBit),
                                        std::memory_order_acq_rel))
      ;
    state.notify_all();
  }

  void abort() {
    state.fetch_or(kAbortBit, std::memory_order_acq_rel);
    state.notify_all();
  }

  void reset() {
    arrived.store(0);
    state.store(0);
    for (auto& r : reading) r.store(false);
  }
};

// Messages are copied into the mailbox of their (source, destination, tag)
// by the sender and out of it by the receiver: a send never waits, and a
// sender's buffer is never read by another thread (nothing to wait for when
// a run is aborted). One lock for every mailbox: pipeline messages are few
// and large, the copies happen outside it.
struct ThreadWorld::Mailboxes {
  using Key = std::tuple<int, int, int>;  // source, destination, tag
  std::mutex mu;
  std::condition_variable arrived;
  std::map<Key, std::deque<std::vector<float>>> queues;

  void put(const Key& key, std::vector<float> message) {
    {
      std::lock_guard<std::mutex> lock(mu);
      queues[key].push_back(std::move(message));
    }
    arrived.notify_all();
  }
  // The next message of `key`, or throws once `world` is aborted.
  std::vector<float> take(const Key& key, const ThreadWorld& world) {
    std::unique_lock<std::mutex> lock(mu);
    std::deque<std::vector<float>>& q = queues[key];
    arrived.wait(lock, [&] { return !q.empty() || world.aborted(); });
    if (q.empty()) throw Error(kStopped);
    std::vector<float> message = std::move(q.front());
    q.pop_front();
    return message;
  }
  // Wakes every receiver (after an abort); the lock orders this after a
  // receiver's check of the abort flag.
  void wake() {
    { std::lock_guard<std::mutex> lock(mu); }
    arrived.notify_all();
  }
  void clear() {
    std::lock_guard<std::mutex> lock(mu);
    queues.clear();
  }
};

namespace {
// The axes with groups, in mesh_groups' order (less the world): mesh axes,
// then collective tuples.
std::vector<int> grouped_axes(const DeviceMesh& mesh) {
  std::vector<int> axes;
  for (int a = 0; a < mesh.rank(); ++a) axes.push_back(a);
  for (int t : mesh.collective_tuples()) axes.push_back(t);
  return axes;
}
}  // namespace

int mesh_group_ids(const DeviceMesh& mesh) {
  return 1 + int(grouped_axes(mesh).size()) * mesh.size();
}

int mesh_group_id(const DeviceMesh& mesh, int axis, int rank) {
  const std::vector<int> axes = grouped_axes(mesh);
  const int slot = int(std::find(axes.begin(), axes.end(), axis) - axes.begin());
  AS_CHECK(slot < int(axes.size()), "internal: mesh ", mesh.to_string(), " has no group for axis ",
           mesh.axis_name(axis));
  return 1 + slot * mesh.size() + mesh.group(rank, axis).front();
}

std::vector<CommGroup> mesh_groups(const DeviceMesh& mesh, int rank) {
  std::vector<CommGroup> groups;
  auto add = [&](int a) {
    groups.push_back(
        {mesh_group_id(mesh, a, rank), mesh.group(rank, a), mesh.coordinate(rank, a), a});
  };
  for (int a = 0; a < mesh.rank(); ++a) add(a);
  CommGroup world{0, {}, rank};
  for (int r = 0; r < mesh.size(); ++r) world.ranks.push_back(r);
  groups.push_back(std::move(world));
  for (int t : mesh.collective_tuples()) add(t);
  return groups;
}

ThreadWorld::ThreadWorld(const DeviceMesh& mesh)
    : mesh_(mesh), mailboxes_(std::make_unique<Mailboxes>()) {
  AS_CHECK(mesh.size() <= kMaxInProcessDevices, "mesh ", mesh.to_string(), " has ", mesh.size(),
           " devices; one process runs at most ", kMaxInProcessDevices,
           " in-process devices (use mpirun for more, or 'autoshard plan' to predict)");
  AS_CHECK(mesh.rank() <= kMaxAxes, "meshes have at most ", kMaxAxes, " axes");
  const int spins = mesh.size() <= static_cast<int>(std::thread::hardware_concurrency()) ? 4000 : 0;
  // Every group state exists before any thread runs, so lookups need no lock.
  async_offset_ = mesh_group_ids(mesh);
  groups_.resize(2 * size_t(async_offset_));
  groups_[0] = std::make_unique<GroupState>(mesh.size(), spins);
  for (int r = 0; r < mesh.size(); ++r)
    for (const CommGroup& g : mesh_groups(mesh, r))
      if (!groups_[size_t(g.id)])
        groups_[size_t(g.id)] = std::make_unique<GroupState>(g.size(), spins);
  // Each group again for its async lane (start_all_reduce).
  for (int id = 0; id < async_offset_; ++id)
    if (groups_[id])
      groups_[id + async_offset_] = std::make_unique<GroupState>(groups_[id]->n, spins);
  for (int r = 0; r < mesh.size(); ++r)
    comms_.push_back(std::make_unique<ThreadCommunicator>(*this, r));
}

// The crew joins first: its threads use the communicators and group states.
ThreadWorld::~ThreadWorld() {
  crew_.reset();
  // Then the devices' communication lanes, before the group states their
  // jobs use: a job left queued (never waited for) finds the world aborted.
  abort();
  comms_.clear();
}

ThreadWorld::GroupState& ThreadWorld::group(const CommGroup& g) {
  return *groups_.at(g.id);
}

void ThreadWorld::abort() {
  aborted_.store(true, std::memory_order_release);
  for (auto& gs : groups_)
    if (gs) gs->abort();
  mailboxes_->wake();
}

// The threads of ranks 1..size-1: each waits for the next generation of
// work, runs it, and reports back.
struct ThreadWorld::Crew {
  std::mutex mu;
  std::condition_variable start, done;
  uint64_t generation = 0;
  int pending = 0;
  bool quit = false;
  const std::function<void(int, Communicator&)>* body = nullptr;
  std::vector<std::thread> threads;

  Crew(ThreadWorld& world, int size) {
    for (int r = 1; r < size; ++r)
      threads.emplace_back([this, &world, r] {
        uint64_t seen = 0;
        std::unique_lock<std::mutex> lock(mu);
        while (true) {
          start.wait(lock, [&] { return quit || generation != seen; });
          if (quit) return;
          seen = generation;
          const auto* work = body;
          lock.unlock();
          world.run_guarded(r, *work);
          lock.lock();
          if (--pending == 0) done.notify_one();
        }
      });
  }
  ~Crew() {
    {
      std::lock_guard<std::mutex> lock(mu);
      quit = true;
    }
    start.notify_all();
    for (auto& t : threads) t.join();
  }
};

void ThreadWorld::run_guarded(int rank, const std::function<void(int, Communicator&)>& body) {
  try {
    body(rank, *comms_[rank]);
  } catch (const std::exception& e) {
    {
      std::lock_guard<std::mutex> lock(error_mu_);
      if (failed_rank_ < 0 && std::string(e.what()) != kStopped) {
        failed_rank_ = rank;
        first_error_ = e.what();
      }
    }
    abort();
  }
}

void ThreadWorld::run(const std::function<void(int, Communicator&)>& body) {
  AS_CHECK(!aborted(), "this set of in-process devices was stopped by an earlier failure");
  failed_rank_ = -1;
  first_error_.clear();
  if (size() > 1) {
    if (!crew_) crew_ = std::make_unique<Crew>(*this, size());
    {
      std::lock_guard<std::mutex> lock(crew_->mu);
      crew_->body = &body;
      crew_->pending = size() - 1;
      ++crew_->generation;
    }
    crew_->start.notify_all();
  }
  run_guarded(0, body);
  if (size() > 1) {
    std::unique_lock<std::mutex> lock(crew_->mu);
    crew_->done.wait(lock, [&] { return crew_->pending == 0; });
  }
  if (aborted()) {
    // Reset so the world can be used again after the error is reported.
    aborted_.store(false);
    for (auto& gs : groups_)
      if (gs) gs->reset();
    mailboxes_->clear();  // messages of the failed run are never received
    if (failed_rank_ < 0) fail("a device stopped without an error message");
    fail(size() > 1 ? cat("device ", failed_rank_, ": ") : std::string(), first_error_);
  }
}

ThreadCommunicator::ThreadCommunicator(ThreadWorld& world, int rank) : world_(world), rank_(rank) {}

ThreadCommunicator::~ThreadCommunicator() = default;

int ThreadCommunicator::size() const {
  return world_.size();
}

namespace {

constexpr int64_t kStreamingCopy = (4 << 20) / 4;

// Copies n floats from src to dst (not overlapping). Not std::memcpy: glibc
// copies blocks from 4 KiB up to its non-temporal threshold with `rep movsb`,
// which on an AMD EPYC (Zen 3) VM read another device's buffer at a tenth of
// this loop's speed (a 64 KiB all-gather at 1.5 GB/s of bus bandwidth where
// this loop gives 10-15). GCC would turn a plain element loop back into a
// memcpy call; a loop over register-wide vectors stays a loop.
void copy_floats(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
#if defined(__AVX__)
  if (n >= kStreamingCopy) {
    for (; reinterpret_cast<uintptr_t>(dst + i) % 32 != 0; ++i) dst[i] = src[i];
    for (; i + 8 <= n; i += 8) _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    _mm_sfence();
  }
#endif
  for (; i + kRegisterLanes <= n; i += kRegisterLanes)
    store_lanes(dst + i, load_lanes<f32xR>(src + i));
  for (; i < n; ++i) dst[i] = src[i];
}

// acc[i] = a[i] op b[i] for i < n.
void combine(const float* a, const float* b, int64_t n, ReduceOp op, float* acc) {
  if (op == ReduceOp::Sum)
    for (int64_t i = 0; i < n; ++i) acc[i] = a[i] + b[i];
  else
    for (int64_t i = 0; i < n; ++i) acc[i] = std::max(a[i], b[i]);
}

// Reduces members' slices [begin, begin + len) into `out`, combining in
// member order ((in0 op in1) op in2 ...) so that every member computes
// bitwise the same value. `out` may be one of the inputs: each block is read
// from every member before it is written.
void reduce_slices(const std::vector<const float*>& in, int64_t begin, int64_t len, ReduceOp op,
                   float* out) {
  constexpr int64_t kBlock = 2048;
  float acc[kBlock];
  for (int64_t b = 0; b < len; b += kBlock) {
    const int64_t n = std::min(kBlock, len - b);
    if (in.size() == 1) {
      copy_floats(in[0] + begin + b, n, acc);
    } else {
      combine(in[0] + begin + b, in[1] + begin + b, n, op, acc);
      for (size_t m = 2; m < in.size(); ++m) combine(acc, in[m] + begin + b, n, op, acc);
    }
    copy_floats(acc, n, out + b);
  }
}

}  // namespace

// Each member reduces one slice of the buffer in place (reading every
// member's input directly), then copies the other slices from their owners.
void ThreadCommunicator::all_reduce(float* data, int64_t count, ReduceOp op, const CommGroup& g) {
  if (g.size() == 1) return;
  auto& s = world_.group(g);
  s.in[g.index] = data;
  s.wait(g.index, false);
  const int n = g.size();
  const int64_t begin = split_offset(count, n, g.index), len = split_size(count, n, g.index);
  reduce_slices(s.in, begin, len, op, data + begin);
  s.wait(g.index, false);  // every slice is final
  for (int m = 0; m < n; ++m) {
    if (m == g.index) continue;
    const int64_t b = split_offset(count, n, m), l = split_size(count, n, m);
    copy_floats(s.in[m] + b, l, data + b);
  }
  s.wait(g.index, true);  // nobody reads our buffer any more
}

void ThreadCommunicator::all_gather(const float* in, float* out, const std::vector<int64_t>& counts,
                                    const CommGroup& g) {
  auto& s = world_.group(g);
  s.in[g.index] = in;
  s.wait(g.index, false);
  int64_t offset = 0;
  for (int m = 0; m < g.size(); ++m) {
    copy_floats(s.in[m], counts[m], out + offset);
    offset += counts[m];
  }
  s.wait(g.index, true);
}

void ThreadCommunicator::reduce_scatter(const float* in, float* out,
                                        const std::vector<int64_t>& counts, const CommGroup& g) {
  auto& s = world_.group(g);
  s.in[g.index] = in;
  s.wait(g.index, false);
  int64_t begin = 0;
  for (int m = 0; m < g.index; ++m) begin += counts[m];
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const bool overlaps = out < in + total && out + counts[g.index] > in;
  if (!overlaps || out == in + begin) {  // nobody else reads what we write
    reduce_slices(s.in, begin, counts[g.index], ReduceOp::Sum, out);
    s.wait(g.index, true);
    return;
  }
  // `out` overlaps other members' slices of our input: reduce into scratch first.
  if (static_cast<int64_t>(scratch_.size()) < std::max<int64_t>(1, counts[g.index]))
    scratch_.resize(std::max<int64_t>(1, counts[g.index]));
  reduce_slices(s.in, begin, counts[g.index], ReduceOp::Sum, scratch_.data());
  s.wait(g.index, true);  // inputs no longer needed
  copy_floats(scratch_.data(), counts[g.index], out);
}

void ThreadCommunicator::broadcast(float* data, int64_t count, int root, const CommGroup& g) {
  if (g.size() == 1) return;
  auto& s = world_.group(g);
  s.out[g.index] = data;
  s.wait(g.index, false);
  if (g.index != root) copy_floats(s.out[root], count, data);
  s.wait(g.index, true);
}

void ThreadCommunicator::all_to_all(const float* in, const std::vector<int64_t>& send_counts,
                                    float* out, const std::vector<int64_t>& recv_counts,
                                    const CommGroup& g) {
  auto& s = world_.group(g);
  s.in[g.index] = in;
  s.counts[g.index] = send_counts.data();
  s.wait(g.index, false);
  // Counts are checked before anything is copied; a mismatch is thrown only
  // after the final wait (never while others read our buffers).
  int bad = -1;
  for (int m = 0; m < g.size() && bad < 0; ++m)
    if (s.counts[m][g.index] != recv_counts[m]) bad = m;
  const int64_t sent = bad >= 0 ? s.counts[bad][g.index] : 0;
  int64_t offset = 0;
  for (int m = 0; m < g.size() && bad < 0; ++m) {
    // Our piece in member m's input comes after the pieces m sends to members before us.
    int64_t src = 0;
    for (int k = 0; k < g.index; ++k) src += s.counts[m][k];
    copy_floats(s.in[m] + src, recv_counts[m], out + offset);
    offset += recv_counts[m];
  }
  s.wait(g.index, true);
  AS_CHECK(bad < 0, "all_to_all: member ", bad, " sends ", sent, " floats where ",
           bad >= 0 ? recv_counts[bad] : 0, " are expected");
}

void ThreadCommunicator::barrier(const CommGroup& g) {
  world_.group(g).wait(g.index, true);
}

// The reduction itself is all_reduce() on the group's async copy: the same
// member-order sum per element, so the same bits as a blocking call.
int64_t ThreadCommunicator::start_all_reduce(float* data, int64_t count, ReduceOp op,
                                             const CommGroup& g) {
  if (g.size() == 1) return 0;
  if (!lane_) lane_ = std::make_unique<OrderedWorker>();
  CommGroup lane = g;
  lane.id = world_.async_group_id(g.id);
  const int64_t ticket = ++lane_jobs_;
  const int64_t submitted = lane_->submit([this, data, count, op, lane, ticket] {
    const int64_t begin = LaneSpans::now_ns();
    all_reduce(data, count, op, lane);
    lane_spans_.record(ticket, begin, LaneSpans::now_ns());
  });
  AS_CHECK(submitted == ticket, "internal: lane tickets out of step");
  return ticket;
}

void ThreadCommunicator::wait_all_reduce(int64_t ticket) {
  if (lane_ && ticket > 0) lane_->wait(ticket);
}

bool ThreadCommunicator::abandon_all_reduces() noexcept {
  if (!lane_) return true;
  world_.abort();
  lane_->drain();
  return true;
}

namespace {
void check_device(int peer, int size, int tag, const char* what) {
  AS_CHECK(peer >= 0 && peer < size, what, ": rank ", peer, " is not a device of this world (",
           size, " devices)");
  AS_CHECK(tag >= 0 && tag <= Communicator::kMaxTag, what, ": tag ", tag, " is outside 0..",
           Communicator::kMaxTag);
}
}  // namespace

void ThreadCommunicator::send(const float* data, int64_t count, int dst, int tag) {
  check_device(dst, size(), tag, "send");
  AS_CHECK(count >= 0, "send: negative count ", count);
  world_.mailboxes().put({rank_, dst, tag}, std::vector<float>(data, data + count));
}

void ThreadCommunicator::recv(float* data, int64_t count, int src, int tag) {
  check_device(src, size(), tag, "recv");
  std::vector<float> message = world_.mailboxes().take({src, rank_, tag}, world_);
  AS_CHECK(static_cast<int64_t>(message.size()) == count, "recv: rank ", src, " sent ",
           message.size(), " floats with tag ", tag, " where ", count, " are expected");
  if (count > 0) std::memcpy(data, message.data(), count * sizeof(float));
}

}  // namespace autoshard
