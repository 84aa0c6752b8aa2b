// Iteration over numpy-broadcast operands. Dimensions that are contiguous in
// every operand are merged, so the common cases (same shape, bias over rows)
// become a single long inner loop the compiler vectorises.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct BroadcastPlan {
  std::vector<int64_t> sizes;                 // merged output dims
  std::vector<std::vector<int64_t>> strides;  // per operand, 0 where broadcast
};

// Output is row-major `out`; each operand's shape broadcasts to it.
BroadcastPlan plan_broadcast(const Shape& out, const std::vector<Shape>& operands);

// Runs of the innermost merged dimension: how many there are, and their length.
inline int64_t run_count(const BroadcastPlan& plan) {
  int64_t runs = 1;
  for (size_t d = 0; d + 1 < plan.sizes.size(); ++d) runs *= plan.sizes[d];
  for (int64_t d : plan.sizes)
    if (d == 0) return 0;
  return runs;
}
inline int64_t run_length(const BroadcastPlan& plan) {
  return plan.sizes.empty() ? 1 : plan.sizes.back();
}

// Calls inner(out_offset, operand_offsets, inner_count, inner_strides) once per
// run of the innermost merged dimension, for runs [first, last).
template <typename Inner>
void for_each_run(const BroadcastPlan& plan, int64_t first, int64_t last, Inner&& inner) {
  if (first >= last) return;  // also every walk over an empty output
  const size_t rank = plan.sizes.size();
  const size_t k = plan.strides.size();
  std::vector<int64_t> offs(k, 0), inner_strides(k, 0);
  if (rank == 0) {
    inner(int64_t{0}, offs, int64_t{1}, inner_strides);
    return;
  }
  for (size_t j = 0; j < k; ++j) inner_strides[j] = plan.strides[j][rank - 1];
  const int64_t n = plan.sizes[rank - 1];
  // The odometer over the outer dims, started at run `first`.
  std::vector<int64_t> idx(rank, 0);
  for (int64_t rest = first, d = static_cast<int64_t>(rank) - 2; d >= 0; --d) {
    idx[d] = rest % plan.sizes[d];
    rest /= plan.sizes[d];
    for (size_t j = 0; j < k; ++j) offs[j] += idx[d] * plan.strides[j][d];
  }
  int64_t out_off = first * n;
  for (int64_t run = first; run < last; ++run) {
    inner(out_off, offs, n, inner_strides);
    out_off += n;
    for (size_t d = rank - 1; d-- > 0;) {
      for (size_t j = 0; j < k; ++j) offs[j] += plan.strides[j][d];
      if (++idx[d] < plan.sizes[d]) break;
      for (size_t j = 0; j < k; ++j) offs[j] -= plan.strides[j][d] * plan.sizes[d];
      idx[d] = 0;
    }
  }
}

// Every run.
template <typename Inner>
void for_each_run(const BroadcastPlan& plan, Inner&& inner) {
  for_each_run(plan, 0, run_count(plan), inner);
}

}  // namespace autoshard
