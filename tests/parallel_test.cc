// parallel_for: every element exactly once, chunks fixed by (count, grain)
// alone, inline on one core, and safe with many callers at once (the
// in-process devices each run kernels).
#include "autoshard/tensor/parallel.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace autoshard;

namespace {

// Sums 1 / (i + 1) over [0, count) by chunks, combined in chunk order.
double chunked_sum(int64_t count, int64_t grain) {
  std::vector<double> partial(static_cast<size_t>(chunk_count(count, grain)));
  parallel_for(count, grain, [&](int64_t b, int64_t e) {
    double s = 0;
    for (int64_t i = b; i < e; ++i) s += 1.0 / double(i + 1);
    partial[static_cast<size_t>(b / grain)] = s;
  });
  double s = 0;
  for (double p : partial) s += p;
  return s;
}

}  // namespace

TEST(ParallelFor, VisitsEveryElementOnce) {
  for (int64_t count : {0, 1, 7, 1000, 100003})
    for (int64_t grain : {1, 64, 4096, 1 << 20}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(count));
      parallel_for(count, grain, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b % grain, 0);
        EXPECT_LE(e - b, grain);
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
      });
      for (int64_t i = 0; i < count; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << i;
    }
}

TEST(ParallelFor, ChunkedReductionsGiveTheSameBitsOnAnyNumberOfCores) {
  const double all_cores = chunked_sum(1 << 20, 1000);
  for (int cores : {1, 2, 3, 8}) {
    IntraOpThreadsScope scope(cores);
    EXPECT_EQ(intra_op_threads(), cores);
    EXPECT_EQ(chunked_sum(1 << 20, 1000), all_cores) << cores << " cores";
  }
}

TEST(ParallelFor, OneCoreRunsOnTheCallingThread) {
  IntraOpThreadsScope scope(1);
  const auto me = std::this_thread::get_id();
  parallel_for(1 << 16, 16, [&](int64_t, int64_t) { EXPECT_EQ(std::this_thread::get_id(), me); });
}

// A kernel called inside a chunk (a product inside the attention's loop over
// heads) runs on that chunk's core, on the caller's thread as on a worker's.
TEST(ParallelFor, ChunksDoNotFanOutAgain) {
  IntraOpThreadsScope scope(2);
  std::atomic<int> chunks{0}, alone{0};
  parallel_for(64, 1, [&](int64_t, int64_t) {
    chunks.fetch_add(1);
    if (intra_op_threads() == 1) alone.fetch_add(1);
  });
  EXPECT_EQ(chunks.load(), 64);
  EXPECT_EQ(alone.load(), 64);
  EXPECT_EQ(intra_op_threads(), 2);  // the caller's cores are back after the loop
}

TEST(ParallelFor, TheScopeRestoresTheCallersCores) {
  const int before = intra_op_threads();
  {
    IntraOpThreadsScope scope(1);
    EXPECT_EQ(intra_op_threads(), 1);
  }
  EXPECT_EQ(intra_op_threads(), before);
}

TEST(ParallelFor, ManyCallersAtOnce) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      IntraOpThreadsScope scope(4);
      for (int rep = 0; rep < 50; ++rep)
        parallel_for(10000, 100, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4 * 50 * 10000);
}

// The caller and the workers race for the last chunks of many tiny jobs, with
// a busy thread beside them so that every interleaving gets its turn (a
// worker that saw a job open and found it closed once crashed here).
TEST(ParallelFor, TinyJobsRaceForTheirLastChunk) {
  std::atomic<bool> stop{false};
  std::thread busy([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  IntraOpThreadsScope scope(4);
  int64_t total = 0;
  for (int rep = 0; rep < 20000; ++rep) {
    std::atomic<int64_t> sum{0};
    parallel_for(3, 1, [&](int64_t b, int64_t e) {
      for (int spin = 0; spin < 100 * rep % 700; ++spin) sum.load(std::memory_order_relaxed);
      sum.fetch_add(e - b);
    });
    total += sum.load();
  }
  stop = true;
  busy.join();
  EXPECT_EQ(total, 3 * 20000);
}

// A chunk that throws on a worker thread: the exception reaches the caller
// (no std::terminate) and the pool serves the next loop in full. Retried until a worker has thrown
// (the caller could take every chunk itself on a busy machine).
TEST(ParallelFor, AWorkersExceptionReachesTheCaller) {
  if (machine_cores() < 2) GTEST_SKIP() << "no worker thread on one core";
  IntraOpThreadsScope scope(4);
  const auto me = std::this_thread::get_id();
  bool worker_threw = false;
  for (int attempt = 0; attempt < 50 && !worker_threw; ++attempt) {
    std::atomic<bool> thrown{false};
    try {
      parallel_for(200, 1, [&](int64_t, int64_t) {
        if (std::this_thread::get_id() != me) {
          thrown = true;
          throw std::runtime_error("chunk failed on a worker");
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      });
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "chunk failed on a worker");
      worker_threw = true;
    }
    if (worker_threw) {
      EXPECT_TRUE(thrown.load());
    }
  }
  EXPECT_TRUE(worker_threw) << "no worker ever ran a chunk";
  std::atomic<int64_t> total{0};
  parallel_for(10000, 100, [&](int64_t b, int64_t e) { total.fetch_add(e - b); });
  EXPECT_EQ(total.load(), 10000);
}

// The caller's own chunk throwing: the same, and only the first of several
// exceptions comes back.
TEST(ParallelFor, TheFirstExceptionComesBackOnce) {
  IntraOpThreadsScope scope(4);
  std::atomic<int> ran{0};
  EXPECT_THROW(parallel_for(1000, 1,
                            [&](int64_t b, int64_t) {
                              ++ran;
                              throw std::invalid_argument("chunk " + std::to_string(b));
                            }),
               std::invalid_argument);
  EXPECT_LT(ran.load(), 1000) << "the loop went on after the first exception";
}
