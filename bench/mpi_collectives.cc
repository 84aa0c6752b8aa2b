// OpenMPI's MPI_Allreduce, MPI_Allgather and MPI_Reduce_scatter_block, timed
// exactly like bench_collectives, for the side-by-side comparison:
//
//   mpirun -np 2 bench_mpi_collectives [--ops ...] [--sizes-kib ...]
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "collective_sweep.h"

using bench::iterations_for;
using bench::split_list;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  std::vector<std::string> ops = bench::default_ops();
  std::vector<double> sizes_kib = bench::default_sizes_kib();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ops") ops = split_list(argv[i + 1]);
    if (a == "--sizes-kib") {
      sizes_kib.clear();
      for (const std::string& t : split_list(argv[i + 1])) sizes_kib.push_back(std::stod(t));
    }
  }
  if (rank == 0)
    std::fprintf(stderr, "OpenMPI collectives, %d ranks\n%-14s %10s %10s %11s %11s\n", ranks, "op",
                 "size KiB", "time (us)", "algbw GB/s", "busbw GB/s");
  for (const std::string& op : ops)
    for (double kib : sizes_kib) {
      // Whole buffers a multiple of the ranks (MPI's block collectives need it).
      const long block = std::max(1L, static_cast<long>(kib * 1024 / 4) / ranks);
      const long count = block * ranks;
      std::vector<float> whole(count, 1.0f), part(block, 1.0f);
      auto once = [&] {
        if (op == "allreduce")
          MPI_Allreduce(MPI_IN_PLACE, whole.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
        else if (op == "allgather")
          MPI_Allgather(part.data(), static_cast<int>(block), MPI_FLOAT, whole.data(),
                        static_cast<int>(block), MPI_FLOAT, MPI_COMM_WORLD);
        else
          MPI_Reduce_scatter_block(whole.data(), part.data(), static_cast<int>(block), MPI_FLOAT,
                                   MPI_SUM, MPI_COMM_WORLD);
      };
      const int iters = iterations_for(count * 4.0);
      for (int w = 0; w < 3; ++w) once();
      double seconds = 0;
      for (int batch = 0; batch < 3; ++batch) {  // the best of three, as bench_collectives
        MPI_Barrier(MPI_COMM_WORLD);
        const double t0 = MPI_Wtime();
        for (int it = 0; it < iters; ++it) once();
        MPI_Barrier(MPI_COMM_WORLD);
        const double s = (MPI_Wtime() - t0) / iters;
        if (batch == 0 || s < seconds) seconds = s;
      }
      if (rank == 0) {
        const double bytes = count * 4.0, algbw = bytes / seconds / 1e9;
        const double factor = (op == "allreduce" ? 2.0 : 1.0) * (ranks - 1) / ranks;
        std::fprintf(stderr, "%-14s %10.0f %10.1f %11.2f %11.2f\n", op.c_str(), kib, seconds * 1e6,
                     algbw, algbw * factor);
        std::printf(
            "{\"engine\":\"openmpi\",\"op\":\"%s\",\"ranks\":%d,\"bytes\":%.0f,\"seconds\":%g,"
            "\"algbw_GBps\":%g,\"busbw_GBps\":%g}\n",
            op.c_str(), ranks, bytes, seconds, algbw, algbw * factor);
      }
    }
  MPI_Finalize();
}
