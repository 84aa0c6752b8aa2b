// OpenMPI's MPI_Allreduce, timed exactly like bench_allreduce, for the
// side-by-side comparison. Run: mpirun -np 2 bench_mpi_allreduce [--iters K] [--sizes-mib 4,64]
#include <mpi.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int iters = 20;
  std::vector<double> sizes_mib = {4, 64};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--iters") iters = std::stoi(argv[i + 1]);
    if (a == "--sizes-mib") {
      sizes_mib.clear();
      std::stringstream ss(argv[i + 1]);
      for (std::string t; std::getline(ss, t, ',');) sizes_mib.push_back(std::stod(t));
    }
  }
  if (rank == 0)
    std::fprintf(stderr, "OpenMPI MPI_Allreduce, %d ranks\n%12s %12s %12s %12s\n", ranks, "size",
                 "time (ms)", "algbw GB/s", "busbw GB/s");
  for (double mib : sizes_mib) {
    const long count = static_cast<long>(mib * 1048576 / 4);
    std::vector<float> buf(count, 1.0f);
    for (int w = 0; w < 3; ++w)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; ++it)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double seconds = (MPI_Wtime() - t0) / iters;
    if (rank == 0) {
      double bytes = count * 4.0, algbw = bytes / seconds / 1e9,
             busbw = algbw * 2 * (ranks - 1) / ranks;
      std::fprintf(stderr, "%9.0f MiB %12.3f %12.2f %12.2f\n", mib, seconds * 1e3, algbw, busbw);
      std::printf(
          "{\"engine\":\"openmpi\",\"ranks\":%d,\"bytes\":%.0f,\"seconds\":%g,\"algbw_GBps\":%g,"
          "\"busbw_GBps\":%g}\n",
          ranks, bytes, seconds, algbw, busbw);
    }
  }
  MPI_Finalize();
}
