// Converting a value between two shardings: the collectives and local slices
// that take a value from the layout its producer left it in to the layout
// its consumer needs. One function plans them; the partitioner emits exactly
// these steps and the cost model prices exactly these steps, so what is
// priced is what runs.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/reduce_op.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard {

// One step over one mesh axis (an all-reduce: or over a collective tuple of
// them, DeviceMesh::collective_tuples). A dimension split over a
// tuple is a stack of its members, outermost first: a step adds the
// innermost member (reduce-scatter, slice, the target of an all-to-all) or
// removes it (gather, the source of an all-to-all), splitting or joining
// the piece the outer members leave (see tuple_axis).
struct ConversionStep {
  enum class Kind { AllReduce, ReduceScatter, AllGather, AllToAll, Slice };
  Kind kind;
  int axis = -1;                // mesh axis
  int dim = -1;                 // the value's dimension (all but AllReduce)
  ReduceOp op = ReduceOp::Sum;  // AllReduce
  Sharding before;              // the value's sharding when the step starts
  int to_dim = -1;              // AllToAll: the dimension the split moves to
  Sharding after;               // ... and when it ends
};

// The steps from `from` to `to`, in order: partial values combined first
// (straight into the wanted split with a reduce-scatter where possible),
// then unwanted splits moved (an all-to-all, where the same axis is wanted
// next on another dimension: 1/n of the traffic of a gather) or gathered,
// innermost member first, then wanted splits sliced locally. Throws for an
// impossible request (making a value partial).
std::vector<ConversionStep> conversion_plan(const Sharding& from, const Sharding& to,
                                            const DeviceMesh& mesh);

const char* step_name(ConversionStep::Kind kind);

}  // namespace autoshard
