// What bench_collectives and bench_mpi_collectives share, so that both time
// the same sizes the same way.
#pragma once

#include <algorithm>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

inline std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string t; std::getline(ss, t, ',');) out.push_back(t);
  return out;
}

// Repetitions so that a timed batch runs for about 20 ms, between 5 and 2000.
inline int iterations_for(double bytes) {
  return static_cast<int>(std::clamp(2e9 * 0.02 / std::max(bytes, 1.0), 5.0, 2000.0));
}

// The ops and sizes both benchmarks sweep by default.
inline std::vector<std::string> default_ops() {
  return {"allreduce", "allgather", "reducescatter"};
}
inline std::vector<double> default_sizes_kib() {
  return {4, 64, 1024, 4096, 16384, 65536, 262144};
}

}  // namespace bench
