// Memory sizes for checks made before allocating: what this machine can give
// a run, and a size as people read it. Below every layer, like error.h (the
// IOPDDL solver's reader and the cluster files use it as much as the runtime).
#pragma once

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "autoshard/environment.h"

namespace autoshard {

// Bytes the kernel reports as available now (MemAvailable in /proc/meminfo),
// or nullopt where that cannot be read. AUTOSHARD_MEMORY_LIMIT (a size, as
// --memory-per-device takes it: "8GiB", "512MB", "1G") overrides it, for
// tests and for sharing a machine; a bad value throws naming it.
inline std::optional<int64_t> available_memory_bytes() {
  if (const std::optional<int64_t> limit = env::memory_limit()) return limit;
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("MemAvailable:", 0) == 0) {
      std::istringstream fields(line.substr(13));
      int64_t kib = 0;
      if (fields >> kib) return kib * 1024;
    }
  return std::nullopt;
}

// "1.23 GiB", "512 MiB", ...
inline std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

}  // namespace autoshard
