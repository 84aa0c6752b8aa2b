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

// Calls inner(out_offset, operand_offsets, inner_count, inner_strides) once per
// run of the innermost merged dimension.
template <typename Inner>
void for_each_run(const BroadcastPlan& plan, Inner&& inner) {
  const size_t rank = plan.sizes.size();
  const size_t k = plan.strides.size();
  std::vector<int64_t> offs(k, 0), inner_strides(k, 0);
  if (rank == 0) {
    inner(int64_t{0}, offs, int64_t{1}, inner_strides);
    return;
  }
  for (size_t j = 0; j < k; ++j) inner_strides[j] = plan.strides[j][rank - 1];
  const int64_t n = plan.sizes[rank - 1];
  for (int64_t d : plan.sizes)
    if (d == 0) return;
  std::vector<int64_t> idx(rank, 0);
  int64_t out_off = 0;
  while (true) {
    inner(out_off, offs, n, inner_strides);
    out_off += n;
    // Advance the odometer over the outer dims.
    size_t d = rank - 1;
    while (d-- > 0) {
      ++idx[d];
      for (size_t j = 0; j < k; ++j) offs[j] += plan.strides[j][d];
      if (idx[d] < plan.sizes[d]) break;
      for (size_t j = 0; j < k; ++j) offs[j] -= plan.strides[j][d] * plan.sizes[d];
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 1) return;
  }
}

}  // namespace autoshard
