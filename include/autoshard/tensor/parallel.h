// Intra-op parallelism: kernels split their loops over the cores this thread
// may use. One process-wide pool of worker threads persists for the life of
// the process; a caller takes part in its own loop, so a thread allowed one
// core runs everything inline and never touches the pool.
//
// In-process devices each get cores / devices (see ShardedExecutor), MPI
// ranks cores / ranks on the node; a plain program gets every core.
#pragma once

#include <algorithm>
#include <cstdint>

namespace autoshard {

// The cores this process's kernels share: the machine's, or
// AUTOSHARD_THREADS when set.
int machine_cores();
// Cores the calling thread's kernels may use (default: machine_cores()).
int intra_op_threads();
// Sets it for the calling thread only; n < 1 means 1.
void set_intra_op_threads(int n);

// Sets the calling thread's cores for its lifetime and restores them after.
class IntraOpThreadsScope {
 public:
  explicit IntraOpThreadsScope(int n);
  ~IntraOpThreadsScope();
  IntraOpThreadsScope(const IntraOpThreadsScope&) = delete;
  IntraOpThreadsScope& operator=(const IntraOpThreadsScope&) = delete;

 private:
  int saved_;
};

namespace detail {
using ChunkFn = void (*)(const void* body, int64_t begin, int64_t end);
void run_chunks(int64_t count, int64_t grain, ChunkFn fn, const void* body);
}  // namespace detail

// Calls body(begin, end) on the consecutive chunks [k*grain, (k+1)*grain) of
// [0, count), spread over up to intra_op_threads() threads, and returns when
// all are done. The chunks depend on count and grain only, never on the
// number of threads, so a kernel that reduces each chunk and then combines
// the chunks in order gives the same bits on any number of cores. A body
// that throws stops the loop: no further chunk starts, the chunks already
// running on other threads finish, and the first exception is rethrown on
// the calling thread once no worker holds the loop (never std::terminate on a
// worker). Which chunks ran by then is unspecified, so a kernel should still
// check its inputs before the loop.
template <typename Body>
void parallel_for(int64_t count, int64_t grain, const Body& body) {
  if (count <= 0) return;
  if (grain < 1) grain = 1;
  if (count <= grain || intra_op_threads() <= 1) {
    for (int64_t b = 0; b < count; b += grain) body(b, b + grain < count ? b + grain : count);
    return;
  }
  detail::run_chunks(
      count, grain,
      [](const void* f, int64_t b, int64_t e) { (*static_cast<const Body*>(f))(b, e); }, &body);
}

// Items per chunk so that a chunk holds about 32K elements of work (enough to
// pay for handing it to another core), given the elements of one item.
inline int64_t grain_for(int64_t elements_per_item) {
  constexpr int64_t kChunkElements = 1 << 15;
  return elements_per_item >= kChunkElements
             ? 1
             : kChunkElements / std::max<int64_t>(1, elements_per_item);
}

// Number of chunks parallel_for(count, grain, ...) makes.
inline int64_t chunk_count(int64_t count, int64_t grain) {
  return count <= 0 ? 0 : (count + grain - 1) / grain;
}

}  // namespace autoshard
