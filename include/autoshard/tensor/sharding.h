// Sharding: how one value is laid out over a DeviceMesh. For each dimension,
// the mesh axis it is split over (or a tuple of axes, see tuple_axis; or
// none); plus the mesh axes over which the devices hold partial values that
// combine into the true value: sums that add up (the usual case), or maxima
// whose largest is the true value. Splits follow array_split: n elements over
// k devices give the first n % k one extra (over a tuple: nested, member by
// member).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/reduce_op.h"
#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct Sharding {
  std::vector<int> dims;                // per dimension: axis id, or -1 (replicated)
  std::vector<int> partial;             // sorted mesh axes (never tuples) holding partial values
  ReduceOp partial_op = ReduceOp::Sum;  // how the partial values combine

  static Sharding replicated(int rank) { return {std::vector<int>(rank, -1), {}}; }
  bool operator==(const Sharding& o) const {
    return dims == o.dims && partial == o.partial &&
           (partial.empty() || partial_op == o.partial_op);
  }

  int rank() const { return static_cast<int>(dims.size()); }
  bool is_partial(int axis) const;
  // The dimension split over `axis`, or -1. For a mesh axis: the dimension
  // split over it alone or as a member of a tuple.
  int dim_of(int axis) const;
  // Whether `axis` (or a member of it) splits a dimension or holds partials.
  bool uses(int axis) const;
  bool fully_replicated() const;

  // The block of the global `shape` held by `device`.
  Shape local_shape(const Shape& global, const DeviceMesh& mesh, int device) const;
  std::vector<int64_t> offsets(const Shape& global, const DeviceMesh& mesh, int device) const;

  // "[model, -] partial(data)" with axis names ("partial_max(...)" for
  // maxima; a tuple as "(data,model)").
  std::string to_string(const DeviceMesh& mesh) const;
  // Checks the sharding is well formed for this rank and mesh.
  void validate(const DeviceMesh& mesh, int value_rank, const std::string& what) const;
};

// How one op runs sharded: the shardings it needs its inputs in, and the
// sharding of its output.
struct ShardDecision {
  std::vector<Sharding> inputs;
  Sharding output;
  // Per input, optionally: the layout its conversion passes through, shared
  // with the other consumers of the value in the same part of the step (a
  // planner's choice; empty: converted straight into `inputs`).
  std::vector<std::optional<Sharding>> via = {};
};

// The block of a whole tensor that `device` holds under `sharding` (a copy),
// and the inverse: writing a device's block into a whole tensor.
Tensor block_of(const Tensor& whole, const Sharding& sharding, const DeviceMesh& mesh, int device);
void write_block(Tensor& whole, const Tensor& block, const Sharding& sharding,
                 const DeviceMesh& mesh, int device);

}  // namespace autoshard
