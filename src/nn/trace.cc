#include "autoshard/nn/trace.h"

namespace autoshard {

std::string Trace::path(const std::string& name) const {
  std::string p;
  for (const std::string& s : prefix_) p += s + ".";
  return p + name;
}

Value Trace::weight(const std::string& name, Shape shape, Initializer init) {
  std::string full = path(name);
  initializers_.emplace(full, init);
  return graph_.parameter(full, std::move(shape));
}

}  // namespace autoshard
