#include "autoshard/runtime/memory.h"

#include <sys/resource.h>

#include <cstdio>

namespace autoshard {

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
