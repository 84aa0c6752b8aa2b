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

// Every part is evaluated even when the condition holds: never pass a part
// that the condition guards (dereferencing a null pointer, say); use
// `if (...) fail(...)` instead.
template <typename... Parts>
void check(bool condition, const Parts&... parts) {
  if (!condition) fail(parts...);
}

}  // namespace autoshard
