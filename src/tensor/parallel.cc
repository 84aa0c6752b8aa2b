#include "autoshard/tensor/parallel.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "autoshard/environment.h"

namespace autoshard {
namespace {

// A hint to the core that this thread is waiting in a loop.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

thread_local int tls_threads = 0;  // 0: not set, use the machine's cores

// One parallel_for call. It lives on the caller's stack; the caller leaves
// only once it is off the queue and no worker holds it.
struct Job {
  detail::ChunkFn fn;
  const void* body;
  int64_t count, grain, chunks;
  int helpers_wanted;            // workers that may still join
  std::atomic<int64_t> next{0};  // next chunk to claim
  std::atomic<int> users{0};     // workers inside run()
  // The first exception a chunk threw, rethrown on the caller's thread.
  std::mutex error_mu{};
  std::exception_ptr error{};

  // Claims and runs chunks until none is left. A chunk that throws closes
  // the job (no further chunk is claimed; those already running finish) and
  // the first exception is kept: a worker thread must never let one out.
  void run() {
    for (int64_t k; (k = next.fetch_add(1, std::memory_order_relaxed)) < chunks;) {
      const int64_t b = k * grain;
      try {
        fn(body, b, std::min(count, b + grain));
      } catch (...) {
        next.store(chunks, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
      }
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    // Leaked on purpose: workers may still be parked when static destructors run.
    static Pool* pool = new Pool(machine_cores() - 1);
    return *pool;
  }

  void run(Job& job) {
    const int helpers = job.helpers_wanted;  // read before workers can change it
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(&job);
      queued_.fetch_add(1, std::memory_order_release);  // under mu_: see spin_for_a_job
    }
    if (helpers > 1)
      wake_.notify_all();
    else
      wake_.notify_one();
    job.run();
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.erase(std::find(jobs_.begin(), jobs_.end(), &job));
    }
    while (job.users.load(std::memory_order_acquire) != 0) std::this_thread::yield();
  }

 private:
  explicit Pool(int workers) {
    for (int i = 0; i < workers; ++i) std::thread([this] { work(); }).detach();
  }

  void work() {
    tls_threads = 1;  // a chunk never fans out again
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      // Chunks are claimed outside the lock, so a job seen open may close
      // at any moment: look once and use what was seen.
      Job* job = open_job();
      if (!job) {
        if (spin_for_a_job(lock)) continue;
        wake_.wait(lock);
        continue;
      }
      --job->helpers_wanted;
      job->users.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      job->run();
      job->users.fetch_sub(1, std::memory_order_release);
      lock.lock();
    }
  }

  // Waking a parked thread takes tens of microseconds (a futex round trip,
  // longer in a virtual machine), as long as a small kernel runs: a decode
  // step is hundreds of such kernels. So a worker that finds nothing to do
  // first watches for a new job for a short while before it parks (200 us:
  // llama-124m's int8 decode went from about 70% to 80-94% of the bandwidth
  // limit on 2 cores; 50 us gave less). Returns whether a job was queued
  // meanwhile, with mu_ held again. The count is read again under mu_ (jobs
  // are counted under it): a job queued after the last look but before the
  // lock is seen here, and one queued later finds the worker in wait().
  bool spin_for_a_job(std::unique_lock<std::mutex>& lock) {
    const uint64_t seen = queued_.load(std::memory_order_acquire);
    lock.unlock();
    const auto until = std::chrono::steady_clock::now() + kSpin;
    while (queued_.load(std::memory_order_acquire) == seen &&
           std::chrono::steady_clock::now() < until)
      for (int i = 0; i < 16; ++i) cpu_relax();
    lock.lock();
    return queued_.load(std::memory_order_acquire) != seen;
  }
  static constexpr std::chrono::microseconds kSpin{200};

  // A queued job that still has chunks and wants helpers (mu_ held).
  Job* open_job() {
    for (Job* j : jobs_)
      if (j->helpers_wanted > 0 && j->next.load(std::memory_order_relaxed) < j->chunks) return j;
    return nullptr;
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<Job*> jobs_;
  std::atomic<uint64_t> queued_{0};  // jobs ever queued: what a spinning worker watches
};

}  // namespace

int machine_cores() {
  static const int cores = [] {
    if (const std::optional<int> n = env::threads()) return *n;
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }();
  return cores;
}

int intra_op_threads() {
  return tls_threads > 0 ? tls_threads : machine_cores();
}

void set_intra_op_threads(int n) {
  tls_threads = std::max(1, n);
}

IntraOpThreadsScope::IntraOpThreadsScope(int n) : saved_(tls_threads) {
  set_intra_op_threads(n);
}

IntraOpThreadsScope::~IntraOpThreadsScope() {
  tls_threads = saved_;
}

namespace detail {

void run_chunks(int64_t count, int64_t grain, ChunkFn fn, const void* body) {
  Job job{fn, body, count, grain, chunk_count(count, grain), 0};
  job.helpers_wanted = static_cast<int>(std::min<int64_t>(intra_op_threads() - 1, job.chunks - 1));
  {
    // The caller's own chunks, as a worker's, never fan out again.
    IntraOpThreadsScope chunks_on_one_core(1);
    Pool::get().run(job);
  }
  if (job.error) std::rethrow_exception(job.error);  // no worker holds the job now
}

}  // namespace detail
}  // namespace autoshard
