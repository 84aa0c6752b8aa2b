// Sharding rules: how each primitive runs on sharded inputs. A rule sees the
// shardings its inputs currently have and answers with the shardings it needs
// them in (the partitioner inserts collectives or local slices to get there)
// and the sharding of its output. Rules must be correct for ANY input
// shardings; a rule that cannot use a sharding asks for it to be removed.
#pragma once

#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard {

struct ShardQuery {
  const Graph& graph;
  const Node& node;
  const std::vector<Sharding>& inputs;  // current shardings of the inputs
  const DeviceMesh& mesh;
  const Sharding* hint;  // what the consumers would like the output to be, or null
  const std::vector<const Sharding*>& input_hints;  // the same for each input
};

// Everything a device-local op needs to rewrite its attributes.
struct LocalizeInfo {
  const Node& global;
  const DeviceMesh& mesh;
  int device;
  const ShardDecision& decision;
  const std::vector<Shape>& input_shapes;  // global shapes of the inputs
  Shape local_output_shape() const {
    return decision.output.local_shape(global.shape, mesh, device);
  }
  // Where this device's block of input i (or of the output) sits.
  ShardOrigin input_origin(int i) const {
    return {input_shapes[i], decision.inputs[i].offsets(input_shapes[i], mesh, device)};
  }
  ShardOrigin output_origin() const {
    return {global.shape, decision.output.offsets(global.shape, mesh, device)};
  }
};

// ---- helpers the op files compose their rules from ----

// Replicates every input and the output.
ShardDecision replicate_all(const ShardQuery& q);
// The same sharding without partial values.
Sharding without_partial(Sharding s);
// True when `s` holds partial sums (not maxima).
bool partial_sum(const Sharding& s);
// Whether axis id `axis` (a mesh axis or a tuple, see tuple_axis) shares a
// mesh axis with any of `used`: then it cannot split another dimension.
bool overlaps_any(const std::vector<int>& used, int axis);
// Adds the mesh axes of `axis` (a tuple's members) to the sorted `partial`.
void add_partial(std::vector<int>& partial, int axis);

enum class Linearity {
  None,       // nonlinear: partial sums must be reduced first
  Sum,        // add/sub: partial sums pass if every operand has the same ones
  Product,    // mul: partial sums pass in exactly one operand
  Numerator,  // div: partial sums pass in the numerator only
  Second,     // scatter_add: partial sums pass in the values added (input 1) only
  Unary,      // scale, dropout: partial sums pass
};
// Broadcasting elementwise ops (output dims from the operands, first wins).
ShardDecision elementwise_rule(const ShardQuery& q, Linearity linearity);
// Ops over the last `trailing` axes (softmax, normalize): those replicated,
// all inputs sharded alike, no partial sums.
ShardDecision row_rule(const ShardQuery& q, int trailing);

}  // namespace autoshard
