// The AUTOSHARD_* environment variables autoshard reads, each parsed
// strictly (autoshard/parse.h) and range-checked in one place: a bad value is
// an error naming the variable, never a silent default or an absurd value
// handed on (100000 BLAS threads, a memory cap of -9223372036854775808 bytes).
// A variable set to the empty string counts as unset (`VAR= command`).
// Below every layer, like error.h.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include "autoshard/error.h"
#include "autoshard/parse.h"

namespace autoshard::env {

// The value of `name`, or nullopt when unset or empty.
inline std::optional<std::string> text(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// The most threads AUTOSHARD_THREADS may ask for: 4 x the machine's cores
// (oversubscribing further only adds threads, each with its stacks and
// BLAS buffers).
inline int max_threads() {
  return 4 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// AUTOSHARD_THREADS: the cores this process's kernels share.
inline std::optional<int> threads() {
  const std::optional<std::string> v = text("AUTOSHARD_THREADS");
  if (!v) return std::nullopt;
  const int64_t n = parse_integer("AUTOSHARD_THREADS", *v, INT_MIN, INT_MAX);
  AS_CHECK(n >= 1 && n <= max_threads(), "AUTOSHARD_THREADS ", n, " is out of range (1 to ",
           max_threads(), ", 4 x this machine's cores); unset it to use every core");
  return static_cast<int>(n);
}

// AUTOSHARD_MEMORY_LIMIT: the memory a run may count on, as a size
// ("8GiB", "512MB", "1G", bytes), parsed like --memory-per-device.
inline std::optional<int64_t> memory_limit() {
  const std::optional<std::string> v = text("AUTOSHARD_MEMORY_LIMIT");
  if (!v) return std::nullopt;
  return parse_byte_size("AUTOSHARD_MEMORY_LIMIT", *v);
}

// AUTOSHARD_MPI_MAX_COUNT: the most elements one MPI call moves (the tests
// lower it to exercise transfers split into rounds); at most INT_MAX / 2.
constexpr int64_t kMpiMaxCount = INT_MAX / 2;
inline std::optional<int64_t> mpi_max_count() {
  const std::optional<std::string> v = text("AUTOSHARD_MPI_MAX_COUNT");
  if (!v) return std::nullopt;
  return parse_integer("AUTOSHARD_MPI_MAX_COUNT", *v, 1, kMpiMaxCount);
}

// AUTOSHARD_CRASH_AT: "NAME" or "NAME:K", the crash point (and the K-th
// arrival at it) that kills the process, for the crash tests.
struct CrashAt {
  std::string name;
  int64_t at = 1;
};
inline std::optional<CrashAt> crash_at() {
  const std::optional<std::string> v = text("AUTOSHARD_CRASH_AT");
  if (!v) return std::nullopt;
  CrashAt c{*v, 1};
  if (const size_t colon = v->find(':'); colon != std::string::npos) {
    c.name = v->substr(0, colon);
    c.at = parse_integer("AUTOSHARD_CRASH_AT's count (NAME:K)", v->substr(colon + 1), 1,
                         int64_t{1} << 62);
  }
  AS_CHECK(!c.name.empty(), "AUTOSHARD_CRASH_AT '", *v,
           "' needs a crash point name (NAME or NAME:K)");
  return c;
}

// AUTOSHARD_HOME: where `calibrate` keeps this machine's measurements.
inline std::optional<std::string> home() {
  return text("AUTOSHARD_HOME");
}

// Reads every variable above, so that a bad one stops a command before it
// starts (and on the main thread) rather than wherever it is first read.
inline void check_all() {
  threads();
  memory_limit();
  mpi_max_count();
  crash_at();
}

}  // namespace autoshard::env
