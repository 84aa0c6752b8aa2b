#include "tensor/broadcast.h"

namespace autoshard {

BroadcastPlan plan_broadcast(const Shape& out, const std::vector<Shape>& operands) {
  const size_t rank = out.size();
  std::vector<std::vector<int64_t>> strides;
  for (const Shape& s : operands) {
    std::vector<int64_t> st(rank, 0);
    int64_t step = 1;
    for (size_t i = s.size(); i-- > 0;) {
      size_t o = i + rank - s.size();
      st[o] = s[i] == 1 ? 0 : step;
      step *= s[i];
    }
    strides.push_back(std::move(st));
  }
  // Merge dim d into d+1 when every operand (and the output) walks them as one.
  BroadcastPlan plan;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1 && rank > 1) continue;  // size-1 dims carry no iteration
    bool merge = !plan.sizes.empty();
    for (size_t j = 0; merge && j < strides.size(); ++j)
      merge = plan.strides[j].back() == strides[j][d] * out[d];
    if (merge) {
      plan.sizes.back() *= out[d];
      for (size_t j = 0; j < strides.size(); ++j) plan.strides[j].back() = strides[j][d];
    } else {
      plan.sizes.push_back(out[d]);
      if (plan.strides.empty()) plan.strides.resize(strides.size());
      for (size_t j = 0; j < strides.size(); ++j) plan.strides[j].push_back(strides[j][d]);
    }
  }
  if (plan.strides.empty()) plan.strides.resize(strides.size());
  return plan;
}

}  // namespace autoshard
