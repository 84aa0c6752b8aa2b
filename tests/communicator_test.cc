// Every collective of the in-process communicator on 1 to 8 devices, with
// even and uneven counts, checked against sums computed here directly.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "autoshard/comm/thread_communicator.h"
#include "autoshard/error.h"
#include "autoshard/tensor/array_split.h"

namespace autoshard {
namespace {

float value(int rank, int64_t i) {
  return static_cast<float>(rank * 1000 + i % 997) * 0.5f;
}

class Collectives : public ::testing::TestWithParam<int> {};

TEST_P(Collectives, AllReduceSumAndMax) {
  const int n = GetParam();
  ThreadWorld world(DeviceMesh({n}, {"x"}));
  for (int64_t count : {int64_t(1), int64_t(7), int64_t(1000), int64_t(4099)}) {
    std::vector<std::vector<float>> got(n);
    world.run([&](int rank, Communicator& comm) {
      CommGroup g = mesh_groups(world.mesh(), rank)[0];
      std::vector<float> a(count), b(count);
      for (int64_t i = 0; i < count; ++i) a[i] = b[i] = value(rank, i);
      comm.all_reduce(a.data(), count, ReduceOp::Sum, g);
      comm.all_reduce(b.data(), count, ReduceOp::Max, g);
      a.insert(a.end(), b.begin(), b.end());
      got[rank] = a;
    });
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int m = 0; m < n; ++m) sum += value(m, i);
        ASSERT_FLOAT_EQ(got[r][i], sum) << "rank " << r << " i " << i;
        ASSERT_EQ(got[r][count + i], value(n - 1, i));
        ASSERT_EQ(got[r][i], got[0][i]) << "members must agree bitwise";
      }
  }
}

TEST_P(Collectives, UnevenAllGatherReduceScatterBroadcastAllToAll) {
  const int n = GetParam();
  ThreadWorld world(DeviceMesh({n}, {"x"}));
  const int64_t total = 10 * n + 3;  // array_split gives uneven pieces
  std::vector<int64_t> counts = split_sizes(total, n);
  std::atomic<int> failures{0};
  world.run([&](int rank, Communicator& comm) {
    CommGroup g = mesh_groups(world.mesh(), rank)[0];
    const int64_t mine = counts[rank], off = split_offset(total, n, rank);
    std::vector<float> piece(mine), all(total);
    for (int64_t i = 0; i < mine; ++i) piece[i] = value(0, off + i);
    comm.all_gather(piece.data(), all.data(), counts, g);
    for (int64_t i = 0; i < total; ++i) failures += all[i] != value(0, i);

    std::vector<float> full(total), out(mine);
    for (int64_t i = 0; i < total; ++i) full[i] = value(rank, i);
    comm.reduce_scatter(full.data(), out.data(), counts, g);
    for (int64_t i = 0; i < mine; ++i) {
      float sum = 0;
      for (int m = 0; m < n; ++m) sum += value(m, off + i);
      failures += out[i] != sum;
    }

    std::vector<float> b(5, static_cast<float>(rank));
    comm.broadcast(b.data(), 5, n - 1, g);
    for (float v : b) failures += v != static_cast<float>(n - 1);

    // Member r sends (r + j) % 3 + 1 floats valued r*100+j to member j.
    std::vector<int64_t> send(n), recv(n);
    std::vector<float> in;
    for (int j = 0; j < n; ++j) {
      send[j] = (rank + j) % 3 + 1;
      recv[j] = (j + rank) % 3 + 1;
      for (int64_t k = 0; k < send[j]; ++k) in.push_back(static_cast<float>(rank * 100 + j));
    }
    std::vector<float> got;
    for (int j = 0; j < n; ++j) got.resize(got.size() + recv[j]);
    comm.all_to_all(in.data(), send, got.data(), recv, g);
    int64_t pos = 0;
    for (int j = 0; j < n; ++j)
      for (int64_t k = 0; k < recv[j]; ++k)
        failures += got[pos++] != static_cast<float>(j * 100 + rank);
    comm.barrier(g);
  });
  EXPECT_EQ(failures.load(), 0);
}

// Small messages go through the group's staging slots (two parities that
// alternate between calls), large ones member to member. Rounds of mixed
// collectives on both sides of the threshold, with values that change every
// round, catch a slot reused too early or read stale.
TEST_P(Collectives, StagedAndDirectPathsInterleaved) {
  const int n = GetParam();
  ThreadWorld world(DeviceMesh({n}, {"x"}));
  std::atomic<int> failures{0};
  world.run([&](int rank, Communicator& comm) {
    const CommGroup g = mesh_groups(world.mesh(), rank)[0];
    int round = 0;
    for (int64_t total : {int64_t(3), int64_t(65536), int64_t(65537), int64_t(150001)})
      for (int rep = 0; rep < 3; ++rep, ++round) {
        auto v = [&](int r, int64_t i) { return value(r, i) + static_cast<float>(round); };
        const std::vector<int64_t> counts = split_sizes(total, n);
        const int64_t mine = counts[rank], off = split_offset(total, n, rank);
        std::vector<float> a(total);
        for (int64_t i = 0; i < total; ++i) a[i] = v(rank, i);
        comm.all_reduce(a.data(), total, ReduceOp::Sum, g);
        std::vector<float> piece(mine), all(total);
        for (int64_t i = 0; i < mine; ++i) piece[i] = v(0, off + i);
        comm.all_gather(piece.data(), all.data(), counts, g);
        std::vector<float> full(total), out(std::max<int64_t>(mine, 1));
        for (int64_t i = 0; i < total; ++i) full[i] = v(rank, i);
        comm.reduce_scatter(full.data(), out.data(), counts, g);
        for (int64_t i = 0; i < total; i += 97) {
          float sum = 0;
          for (int m = 0; m < n; ++m) sum += v(m, i);
          failures += a[i] != sum;
          failures += all[i] != v(0, i);
          if (i >= off && i < off + mine) failures += out[i - off] != sum;
        }
      }
  });
  EXPECT_EQ(failures.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Devices, Collectives, ::testing::Range(1, 9));

// Pieces past the size where copies stream past the cache (4 MiB), written
// one float past an aligned address and of odd lengths, so each copy has a
// head, a streamed body and a tail: every element must arrive. (Smaller
// pieces, and three members and more, are covered by the tests above.)
TEST(Collectives, LargeMisalignedPiecesArriveWhole) {
  for (int n : {2}) {
    ThreadWorld world(DeviceMesh({n}, {"x"}));
    const int64_t total = int64_t(n) * (1 << 20) + 5;
    const std::vector<int64_t> counts = split_sizes(total, n);
    std::atomic<int64_t> failures{0};
    world.run([&](int rank, Communicator& comm) {
      const CommGroup g = mesh_groups(world.mesh(), rank)[0];
      const int64_t mine = counts[rank], off = split_offset(total, n, rank);
      std::vector<float> piece(mine), all(total + 1), reduced(total);
      for (int64_t i = 0; i < mine; ++i) piece[i] = value(0, off + i);
      comm.all_gather(piece.data(), all.data() + 1, counts, g);
      for (int64_t i = 0; i < total; ++i) failures += all[i + 1] != value(0, i);
      for (int64_t i = 0; i < total; ++i) reduced[i] = value(rank, i);
      comm.all_reduce(reduced.data(), total, ReduceOp::Sum, g);
      for (int64_t i = 0; i < total; ++i) {
        float sum = 0;
        for (int m = 0; m < n; ++m) sum += value(m, i);
        failures += reduced[i] != sum;
      }
      std::vector<float> b(total + 1, static_cast<float>(rank));
      comm.broadcast(b.data() + 1, total, 0, g);
      for (int64_t i = 0; i < total; ++i) failures += b[i + 1] != 0.0f;
    });
    EXPECT_EQ(failures.load(), 0) << n << " devices";
  }
}

// Runs of mesh axes have groups of their own (the collective tuples):
// (y,z) of a 2x2x2 mesh is the four devices that share x, (x,y,z) all
// eight; a size-1 axis between members is skipped. One all-reduce sums
// over the whole group.
TEST(Collectives, TuplesOfAxesHaveGroups) {
  const DeviceMesh mesh({2, 2, 2}, {"x", "y", "z"});
  const int yz = tuple_axis({1, 2}), xyz = tuple_axis({0, 1, 2}), xy = tuple_axis({0, 1});
  EXPECT_EQ(mesh.collective_tuples(), (std::vector<int>{xy, xyz, yz}));
  EXPECT_FALSE(mesh.collective_axis(tuple_axis({0, 2})));  // not a run: member by member
  EXPECT_EQ(DeviceMesh({2, 1, 3}, {"a", "b", "c"}).collective_tuples(),
            (std::vector<int>{tuple_axis({0, 2})}));
  ThreadWorld world(mesh);
  std::vector<float> over_yz(8), over_all(8);
  world.run([&](int rank, Communicator& comm) {
    const std::vector<CommGroup> groups = mesh_groups(mesh, rank);
    float a = float(rank), b = float(rank);
    comm.all_reduce(&a, 1, ReduceOp::Sum, *group_of_axis(groups, yz));
    comm.all_reduce(&b, 1, ReduceOp::Sum, *group_of_axis(groups, xyz));
    over_yz[size_t(rank)] = a;
    over_all[size_t(rank)] = b;
  });
  EXPECT_EQ(over_yz, (std::vector<float>{6, 6, 6, 6, 22, 22, 22, 22}));
  EXPECT_EQ(over_all, std::vector<float>(8, 28));
  EXPECT_EQ(mesh.group(5, yz), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(mesh.axis_stride(yz), 1);
  EXPECT_EQ(mesh.axis_stride(xy), 2);
}

TEST(Collectives, SubGroupsOfA2x3Mesh) {
  DeviceMesh mesh({2, 3}, {"data", "model"});
  ThreadWorld world(mesh);
  std::vector<float> model_sum(6), data_sum(6);
  world.run([&](int rank, Communicator& comm) {
    auto groups = mesh_groups(mesh, rank);
    float a = static_cast<float>(rank), b = static_cast<float>(rank);
    comm.all_reduce(&a, 1, ReduceOp::Sum, groups[1]);  // over model: ranks of one row
    comm.all_reduce(&b, 1, ReduceOp::Sum, groups[0]);  // over data: ranks of one column
    model_sum[rank] = a;
    data_sum[rank] = b;
  });
  EXPECT_EQ(model_sum, (std::vector<float>{3, 3, 3, 12, 12, 12}));
  EXPECT_EQ(data_sum, (std::vector<float>{3, 5, 7, 3, 5, 7}));
}

TEST(Collectives, AFailingDeviceStopsTheOthers) {
  ThreadWorld world(DeviceMesh({4}, {"x"}));
  auto start = std::chrono::steady_clock::now();
  try {
    world.run([&](int rank, Communicator& comm) {
      CommGroup g = mesh_groups(world.mesh(), rank)[0];
      if (rank == 2) throw Error("boom");
      float x = 1;
      comm.all_reduce(&x, 1, ReduceOp::Sum, g);  // would wait forever for rank 2
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "device 2: boom");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  // The world is usable again afterwards.
  world.run(
      [&](int rank, Communicator& comm) { comm.barrier(mesh_groups(world.mesh(), rank)[0]); });
}

// A device fails at a random collective of a random sequence, after a random
// delay, while the others are anywhere in their barriers: every run must end
// (no device sleeps forever) with the failing device's error. A watchdog
// turns a hang into a failure. Run under ThreadSanitizer by scripts/test.sh.
TEST(Collectives, AbortAtARandomCollectiveNeverHangs) {
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 1200 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!done) {
      std::fprintf(stderr, "AbortAtARandomCollectiveNeverHangs: a device hung\n");
      std::_Exit(1);
    }
  });
  ThreadWorld world(DeviceMesh({2, 3}, {"a", "b"}));
  std::mt19937 rng(99);
  for (int trial = 0; trial < 400; ++trial) {
    const int failing = static_cast<int>(rng() % 6), at = static_cast<int>(rng() % 12);
    const uint32_t pattern = rng(), seed = rng();
    try {
      world.run([&](int rank, Communicator& comm) {
        std::vector<CommGroup> groups = mesh_groups(world.mesh(), rank);
        std::vector<float> buf(64, 1.0f), out(64 * 3);
        std::minstd_rand delays(seed + rank);
        for (int k = 0; k < 12; ++k) {
          // Every device arrives at a random moment, so the abort lands at
          // every point of the others' entry into a barrier.
          for (int spin = 0, until = static_cast<int>(delays() % 3000); spin < until; ++spin)
            std::atomic_signal_fence(std::memory_order_seq_cst);  // a delay the compiler keeps
          if (rank == failing && k == at) throw Error("injected failure");
          const CommGroup& g = groups[(pattern >> k) & 1];
          if ((pattern >> (k + 12)) & 1)
            comm.all_reduce(buf.data(), 64, ReduceOp::Sum, g);
          else
            comm.barrier(g);
        }
      });
      FAIL() << "trial " << trial << ": expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "device " + std::to_string(failing) + ": injected failure")
          << "trial " << trial;
    }
  }
  done = true;
  watchdog.join();
}

}  // namespace
}  // namespace autoshard
