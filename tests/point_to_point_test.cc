// Point-to-point send/receive (pipeline stages' activations and gradients):
// in-process devices here; MPI ranks by tests/mpi/pipeline_p2p_test.sh, which
// runs the PointToPointMpi tests of this binary under mpirun (skipped when
// not launched by it).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "autoshard/comm/mpi_communicator.h"
#include "autoshard/comm/thread_communicator.h"
#include "autoshard/error.h"

namespace autoshard {
namespace {

std::vector<float> message(int from, int tag, int64_t count) {
  std::vector<float> m(count);
  for (int64_t i = 0; i < count; ++i) m[i] = float(from * 100000 + tag * 1000 + i % 997);
  return m;
}

// Every rank sends three messages to the next rank (two with tag 1, then
// one with tag 0, the second of 5000 floats) and receives the previous
// rank's in another order: tag 0 first. Returns the mismatches seen.
int ring(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  comm.send(message(me, 1, 7).data(), 7, next, 1);
  comm.send(message(me, 2, 5000).data(), 5000, next, 1);
  comm.send(message(me, 0, 3).data(), 3, next, 0);
  comm.send(nullptr, 0, next, 5);  // empty messages are messages
  int bad = 0;
  std::vector<float> got(3);
  comm.recv(got.data(), 3, prev, 0);
  bad += got != message(prev, 0, 3);
  got.resize(7);
  comm.recv(got.data(), 7, prev, 1);
  bad += got != message(prev, 1, 7);
  got.resize(5000);
  comm.recv(got.data(), 5000, prev, 1);
  bad += got != message(prev, 2, 5000);
  comm.recv(nullptr, 0, prev, 5);
  return bad;
}

TEST(PointToPoint, RingKeepsOrderPerTag) {
  for (int n : {1, 2, 3, 4}) {
    ThreadWorld world(DeviceMesh({n}, {"pipe"}));
    std::atomic<int> bad{0};
    for (int round = 0; round < 2; ++round)  // mailboxes are reused across runs
      world.run([&](int, Communicator& comm) { bad += ring(comm); });
    EXPECT_EQ(bad, 0) << n << " devices";
  }
}

TEST(PointToPoint, WrongLengthIsAnErrorNamingBoth) {
  ThreadWorld world(DeviceMesh({2}, {"pipe"}));
  try {
    world.run([&](int rank, Communicator& comm) {
      std::vector<float> data(4, 1.0f);
      if (rank == 0) comm.send(data.data(), 4, 1, 3);
      if (rank == 1) comm.recv(data.data(), 2, 0, 3);
    });
    FAIL() << "a short receive must fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 sent 4 floats with tag 3 where 2 are expected"),
              std::string::npos)
        << e.what();
  }
  // The world is usable again after the error.
  std::atomic<int> bad{0};
  world.run([&](int, Communicator& comm) { bad += ring(comm); });
  EXPECT_EQ(bad, 0);
}

TEST(PointToPoint, AFailedPeerWakesAWaitingReceiver) {
  ThreadWorld world(DeviceMesh({3}, {"pipe"}));
  try {
    world.run([&](int rank, Communicator& comm) {
      float x = 0;
      if (rank == 2) fail("stage 2 broke");
      comm.recv(&x, 1, 2, 0);  // never sent: must not hang
    });
    FAIL() << "the failure must be reported";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "device 2: stage 2 broke");
  }
}

TEST(PointToPoint, BadPeerOrTag) {
  ThreadWorld world(DeviceMesh({2}, {"pipe"}));
  auto error_of = [&](int peer, int tag) {
    try {
      world.run([&](int rank, Communicator& comm) {
        float x = 0;
        if (rank == 0) comm.send(&x, 1, peer, tag);
      });
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of(2, 0), "device 0: send: rank 2 is not a device of this world (2 devices)");
  EXPECT_EQ(error_of(1, -1), "device 0: send: tag -1 is outside 0..32767");
}

// Under mpirun (tests/mpi/pipeline_p2p_test.sh): the same ring over ranks.
TEST(PointToPointMpi, RingOverRanks) {
  if (!launched_by_mpi()) GTEST_SKIP() << "runs under mpirun (tests/mpi/pipeline_p2p_test.sh)";
  {
    MpiCommunicator comm(DeviceMesh({mpi_size()}, {"pipe"}));
    EXPECT_EQ(ring(comm), 0) << "rank " << comm.rank();
    EXPECT_EQ(ring(comm), 0) << "rank " << comm.rank();
    // A receive of the wrong length fails on the receiver, and the next
    // message with that tag is still received in step.
    const int n = comm.size(), me = comm.rank();
    std::vector<float> data = message(me, 4, 9);
    comm.send(data.data(), 9, (me + 1) % n, 4);
    comm.send(data.data(), 9, (me + 1) % n, 4);
    std::vector<float> got(9);
    EXPECT_THROW(comm.recv(got.data(), 8, (me + n - 1) % n, 4), Error);
    comm.recv(got.data(), 9, (me + n - 1) % n, 4);
    EXPECT_EQ(got, message((me + n - 1) % n, 4, 9));
  }
  // The process ends after this test (the script runs it alone): MPI must
  // be finalized by every rank, or mpirun reports an improper exit.
  mpi_finalize();
}

}  // namespace
}  // namespace autoshard
