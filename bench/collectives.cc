// Bandwidth of the in-process collectives: all-reduce, all-gather and
// reduce-scatter, as nccl-tests define it: algbw = bytes / time with bytes
// the whole buffer (all-reduce's, all-gather's output, reduce-scatter's
// input), busbw = algbw * 2(n-1)/n for all-reduce and algbw * (n-1)/n for the
// other two. bench_mpi_collectives times OpenMPI the same way.
//
//   bench_collectives [--ranks 2] [--ops allreduce,allgather,reducescatter]
//                     [--sizes-kib 4,64,1024,4096,16384,65536,262144]
// Prints a table on stderr and one JSON object per (op, size) on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "autoshard/comm/thread_communicator.h"
#include "autoshard/tensor/array_split.h"
#include "collective_sweep.h"

using namespace autoshard;

using bench::iterations_for;
using bench::split_list;

int main(int argc, char** argv) {
  int ranks = 2;
  std::vector<std::string> ops = bench::default_ops();
  std::vector<double> sizes_kib = bench::default_sizes_kib();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--ranks") {
      ranks = std::stoi(v);
    } else if (a == "--ops") {
      ops = split_list(v);
    } else if (a == "--sizes-kib") {
      sizes_kib.clear();
      for (const std::string& t : split_list(v)) sizes_kib.push_back(std::stod(t));
    } else {
      std::fprintf(stderr,
                   "unknown argument %s (see the comment at the top of bench/collectives.cc)\n",
                   a.c_str());
      return 2;
    }
  }
  DeviceMesh mesh({ranks}, {"x"});
  ThreadWorld world(mesh);
  std::fprintf(stderr, "in-process collectives, %d ranks\n%-14s %10s %10s %11s %11s\n", ranks, "op",
               "size KiB", "time (us)", "algbw GB/s", "busbw GB/s");
  for (const std::string& op : ops)
    for (double kib : sizes_kib) {
      const int64_t count = static_cast<int64_t>(kib * 1024 / 4);
      const std::vector<int64_t> counts = split_sizes(count, ranks);
      std::vector<std::vector<float>> whole(ranks, std::vector<float>(count, 1.0f));
      std::vector<std::vector<float>> part(ranks);
      for (int r = 0; r < ranks; ++r) part[r].assign(std::max<int64_t>(1, counts[r]), 1.0f);
      const int iters = iterations_for(count * 4.0);
      double seconds = 0;
      world.run([&](int rank, Communicator& comm) {
        const CommGroup g = mesh_groups(mesh, rank)[0];
        auto once = [&] {
          if (op == "allreduce")
            comm.all_reduce(whole[rank].data(), count, ReduceOp::Sum, g);
          else if (op == "allgather")
            comm.all_gather(part[rank].data(), whole[rank].data(), counts, g);
          else
            comm.reduce_scatter(whole[rank].data(), part[rank].data(), counts, g);
        };
        for (int w = 0; w < 3; ++w) once();
        // The best of three timed batches: a VM's scheduler hiccups now and then.
        for (int batch = 0; batch < 3; ++batch) {
          comm.barrier(g);
          const auto t0 = std::chrono::steady_clock::now();
          for (int it = 0; it < iters; ++it) once();
          comm.barrier(g);
          const double s =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
          if (rank == 0 && (batch == 0 || s < seconds)) seconds = s;
        }
      });
      const double bytes = count * 4.0, algbw = bytes / seconds / 1e9;
      const double factor = (op == "allreduce" ? 2.0 : 1.0) * (ranks - 1) / ranks;
      std::fprintf(stderr, "%-14s %10.0f %10.1f %11.2f %11.2f\n", op.c_str(), kib, seconds * 1e6,
                   algbw, algbw * factor);
      std::printf("%s\n", nlohmann::json{{"engine", "autoshard threads"},
                                         {"op", op},
                                         {"ranks", ranks},
                                         {"bytes", bytes},
                                         {"seconds", seconds},
                                         {"algbw_GBps", algbw},
                                         {"busbw_GBps", algbw * factor}}
                              .dump()
                              .c_str());
    }
}
