#include "autoshard/runtime/memory.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "autoshard/environment.h"

namespace autoshard {

std::optional<int64_t> available_memory_bytes() {
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

std::string format_bytes(double bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (bytes >= 1024 && u < 6) bytes /= 1024, ++u;
  char buf[48];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", bytes, units[u]);
  return buf;
}

std::string format_in_mib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / 1048576.0);
  return buf;
}

int64_t peak_rss_bytes() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return int64_t{usage.ru_maxrss} * 1024;  // Linux reports KiB
}

}  // namespace autoshard
