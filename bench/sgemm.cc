// The machine's GEMM peak: OpenBLAS sgemm on square matrices (n = 768..2048)
// with 1 thread and with every core. The speed benchmarks report their
// figures as fractions of this peak, measured in the same run.
//
//   bench_sgemm [--threads N] [--repeats 5]
// Prints a table on stderr and {"engine":"sgemm","threads":N,"peak_gflops":...,
// "core":...} on stdout, one line per thread count. Like the CLI it restarts
// with the best kernels for the CPU (ir/blas_core.h);
// AUTOSHARD_KEEP_BLAS_CORE=1 measures the kernels OpenBLAS chooses itself.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "autoshard/ir/blas_core.h"

namespace {

// Best of `repeats` calls of C = A B with n x n matrices, in GFLOP/s.
double sgemm_gflops(int n, int repeats) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  double best = 0;
  for (int r = 0; r < repeats + 1; ++r) {  // the first call warms up
    auto t0 = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) best = std::max(best, 2.0 * n * n * double(n) / s * 1e-9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  autoshard::blas::use_best_blas_kernels(argv);
  const autoshard::blas::BlasInfo blas = autoshard::blas::blas_info();
  std::fprintf(stderr, "%s\n", autoshard::blas::describe(blas).c_str());
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--threads")
      threads = std::stoi(argv[i + 1]);
    else if (a == "--repeats")
      repeats = std::stoi(argv[i + 1]);
  }
  // Every core first: after a switch down to one thread OpenBLAS can be slow
  // to bring its workers back.
  std::vector<int> counts{threads};
  if (threads > 1) counts.push_back(1);
  for (int t : counts) {
    openblas_set_num_threads(t);
    nlohmann::json sizes = nlohmann::json::object();
    double peak = 0;
    for (int n : {768, 1024, 1536, 2048}) {
      const double g = sgemm_gflops(n, repeats);
      sizes[std::to_string(n)] = g;
      peak = std::max(peak, g);
      std::fprintf(stderr, "sgemm n=%d, %d thread(s): %.1f GFLOP/s\n", n, t, g);
    }
    std::printf("%s\n", nlohmann::json{{"engine", "sgemm"},
                                       {"threads", t},
                                       {"peak_gflops", peak},
                                       {"gflops_by_n", sizes},
                                       {"core", blas.core},
                                       {"core_chosen_by", blas.chosen_by}}
                            .dump()
                            .c_str());
  }
}
