// Error: the one exception type autoshard throws for bad input or misuse.
// Messages name the problem and, where there is one, the fix.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace autoshard {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename... Parts>
std::string cat(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

template <typename... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(cat(parts...));
}

}  // namespace autoshard

// AS_CHECK(condition, message parts...): throws autoshard::Error with the
// parts concatenated when the condition is false. The parts are evaluated
// only then, so a check costs one branch on hot paths and a part may depend
// on the condition (a pointer the condition tests for null, say).
#define AS_CHECK(condition, ...)                          \
  do {                                                    \
    if (!(condition)) [[unlikely]]                        \
      ::autoshard::fail(__VA_ARGS__);                     \
  } while (false)
