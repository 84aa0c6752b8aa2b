#include "autoshard/shard/conversion.h"

#include <algorithm>

#include "autoshard/error.h"

namespace autoshard {

const char* step_name(ConversionStep::Kind kind) {
  switch (kind) {
    case ConversionStep::Kind::AllReduce:
      return "all_reduce";
    case ConversionStep::Kind::ReduceScatter:
      return "reduce_scatter";
    case ConversionStep::Kind::AllGather:
      return "all_gather";
    case ConversionStep::Kind::AllToAll:
      return "all_to_all";
    case ConversionStep::Kind::Slice:
      return "slice";
  }
  return "?";
}

std::vector<ConversionStep> conversion_plan(const Sharding& from, const Sharding& to,
                                            const DeviceMesh& mesh) {
  AS_CHECK(from.rank() == to.rank(), "internal: converting a rank-", from.rank(), " value to rank ",
           to.rank());
  for (int a : to.partial)
    AS_CHECK(from.is_partial(a) && from.partial_op == to.partial_op,
             "internal: cannot make a value partial over '", mesh.axis_names()[a], "'");
  std::vector<ConversionStep> steps;
  Sharding cur = from;
  // 1. Combine partial values: sums straight into the wanted split when there is one.
  for (int a : std::vector<int>(from.partial)) {
    if (to.is_partial(a)) continue;
    const int d = to.dim_of(a);
    if (d >= 0 && cur.dims[d] < 0 && cur.partial_op == ReduceOp::Sum) {
      steps.push_back({ConversionStep::Kind::ReduceScatter, a, d, ReduceOp::Sum, cur});
      cur.dims[d] = a;
    } else {
      steps.push_back({ConversionStep::Kind::AllReduce, a, -1, cur.partial_op, cur});
    }
    cur.partial.erase(std::find(cur.partial.begin(), cur.partial.end(), a));
  }
  if (cur.partial.empty()) cur.partial_op = ReduceOp::Sum;
  // 2. Move every split that is not wanted where it is to the dimension that
  // wants its axis, if that one is still whole; gather it otherwise.
  for (int d = 0; d < cur.rank(); ++d)
    if (const int a = cur.dims[d]; a >= 0 && a != to.dims[d]) {
      const int e = to.dim_of(a);
      if (e >= 0 && cur.dims[e] < 0) {
        steps.push_back({ConversionStep::Kind::AllToAll, a, d, ReduceOp::Sum, cur, e});
        cur.dims[e] = a;
      } else {
        steps.push_back({ConversionStep::Kind::AllGather, a, d, ReduceOp::Sum, cur});
      }
      cur.dims[d] = -1;
    }
  // 3. Take this device's block of every newly wanted split (no communication).
  for (int d = 0; d < cur.rank(); ++d)
    if (to.dims[d] >= 0 && cur.dims[d] < 0) {
      steps.push_back({ConversionStep::Kind::Slice, to.dims[d], d, ReduceOp::Sum, cur});
      cur.dims[d] = to.dims[d];
    }
  return steps;
}

}  // namespace autoshard
