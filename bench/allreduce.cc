// All-reduce bus bandwidth of the in-process communicator (nccl-tests'
// definition: busbw = algbw * 2(n-1)/n, algbw = bytes / time). Prints a table
// on stderr and one JSON object per size on stdout.
//
//   bench_allreduce [--ranks 2] [--iters 20] [--sizes-mib 4,64]
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "autoshard/comm/thread_communicator.h"

using namespace autoshard;

int main(int argc, char** argv) {
  int ranks = 2, iters = 20;
  std::vector<double> sizes_mib = {4, 64};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v = i + 1 < argc ? argv[i + 1] : "";
    if (a == "--ranks")
      ranks = std::stoi(v), ++i;
    else if (a == "--iters")
      iters = std::stoi(v), ++i;
    else if (a == "--sizes-mib") {
      sizes_mib.clear();
      std::stringstream ss(v);
      for (std::string t; std::getline(ss, t, ',');) sizes_mib.push_back(std::stod(t));
      ++i;
    } else {
      std::fprintf(stderr, "usage: bench_allreduce [--ranks N] [--iters K] [--sizes-mib 4,64]\n");
      return 2;
    }
  }
  DeviceMesh mesh({ranks}, {"x"});
  ThreadWorld world(mesh);
  std::fprintf(stderr, "in-process all-reduce, %d ranks\n%12s %12s %12s %12s\n", ranks, "size",
               "time (ms)", "algbw GB/s", "busbw GB/s");
  for (double mib : sizes_mib) {
    const int64_t count = static_cast<int64_t>(mib * 1048576 / 4);
    std::vector<std::vector<float>> bufs(ranks, std::vector<float>(count, 1.0f));
    double seconds = 0;
    world.run([&](int rank, Communicator& comm) {
      CommGroup g = mesh_groups(mesh, rank)[0];
      for (int w = 0; w < 3; ++w) comm.all_reduce(bufs[rank].data(), count, ReduceOp::Sum, g);
      comm.barrier(g);
      auto t0 = std::chrono::steady_clock::now();
      for (int it = 0; it < iters; ++it)
        comm.all_reduce(bufs[rank].data(), count, ReduceOp::Sum, g);
      comm.barrier(g);
      if (rank == 0)
        seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    });
    const double bytes = count * 4.0, algbw = bytes / seconds / 1e9,
                 busbw = algbw * 2 * (ranks - 1) / ranks;
    std::fprintf(stderr, "%9.0f MiB %12.3f %12.2f %12.2f\n", mib, seconds * 1e3, algbw, busbw);
    std::printf("%s\n", nlohmann::json{{"engine", "autoshard threads"},
                                       {"ranks", ranks},
                                       {"bytes", bytes},
                                       {"seconds", seconds},
                                       {"algbw_GBps", algbw},
                                       {"busbw_GBps", busbw}}
                            .dump()
                            .c_str());
  }
}
