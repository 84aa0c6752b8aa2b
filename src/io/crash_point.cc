#include "autoshard/io/crash_point.h"

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace autoshard {

namespace {
struct Target {
  std::string name;
  long at = 1;  // which arrival kills
  long seen = 0;
  std::mutex mu;
};
Target* target() {
  static Target* t = [] {
    const char* spec = std::getenv("AUTOSHARD_CRASH_AT");
    if (spec == nullptr || *spec == '\0') return static_cast<Target*>(nullptr);
    auto* t = new Target;
    std::string s = spec;
    if (size_t colon = s.find(':'); colon != std::string::npos) {
      t->at = std::atol(s.c_str() + colon + 1);
      s.resize(colon);
    }
    t->name = s;
    return t;
  }();
  return t;
}
}  // namespace

void crash_point(const char* name) {
  Target* t = target();
  if (t == nullptr || t->name != name) return;
  std::lock_guard<std::mutex> lock(t->mu);
  if (++t->seen == t->at) std::raise(SIGKILL);
}

}  // namespace autoshard
