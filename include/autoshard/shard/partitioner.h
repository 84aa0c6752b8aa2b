// The partitioner: from one global Graph (a whole training step) and a
// sharding for every parameter and input, it produces each device's local
// Graph with the collectives it needs. It is correct for ANY shardings: every
// op's sharding rule says which layouts it needs its inputs in, and the
// partitioner inserts all-reduce, reduce-scatter, all-gather or a local slice
// wherever a value is not in the layout its consumer needs. Choosing good
// shardings is the planner's job, not this one's: a planner may also fix the
// strategy of any op (its decision), which then replaces the op's rule.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/shard/conversion.h"
#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard {

// The layouts a partition starts from.
struct PartitionRequest {
  // Parameter and Input ids (missing: replicated); an Input's may be
  // partial (each device binds its own part of a sum).
  std::map<int, Sharding> leaves;
  // Ops whose strategy a planner fixed: the shardings of their inputs and
  // output (the rest follow their sharding rule).
  std::map<int, ShardDecision> decisions;
  // Megatron's sequence parallelism over this mesh axis (-1: off): an op
  // that its rule leaves whole over the axis, and whose output has a
  // sequence dimension (one tied to the sequence of a [batch, sequence, ...]
  // input), runs split along that dimension over the axis instead. With
  // Megatron's weight layout these are the layer norms, dropouts, residual
  // adds and embeddings, forward and backward; the all-reduces around the
  // split blocks become reduce-scatters and all-gathers.
  int sequence_parallel_axis = -1;
};

// One collective of the partitioned step, as device 0 runs it.
struct CollectiveRecord {
  std::string kind;   // all_reduce, all_gather, reduce_scatter
  std::string axis;   // mesh axis name
  std::string value;  // a readable name of the global value moved
  int64_t bytes = 0;  // bytes of device 0's buffer
};

struct Partition {
  DeviceMesh mesh;
  std::vector<Sharding> sharding;          // per global node: the layout of its value
  std::vector<ShardDecision> decision;     // per global op: the shardings it ran with
  std::vector<Shape> global_shape;         // per global node
  std::vector<std::string> leaf_name;      // per global node: its key (leaves only)
  std::vector<int> devices;                // the devices that have a local program
  std::vector<Graph> local;                // per device (empty for devices not lowered)
  std::vector<std::vector<int>> local_of;  // per lowered device: global id -> local id (-1: absent)
  std::vector<std::vector<int>> outputs;   // per lowered device: the requested outputs, replicated
  std::vector<CollectiveRecord> collectives;
};

// Outputs come back fully replicated. Only the devices in `devices` get a
// local graph (empty: every device), as an MPI rank needs only its own and a
// prediction only device 0's.
Partition partition(const Graph& graph, const DeviceMesh& mesh, const PartitionRequest& request,
                    const std::vector<int>& outputs, const std::vector<int>& devices = {});
// The same with leaf layouts only.
Partition partition(const Graph& graph, const DeviceMesh& mesh,
                    const std::map<int, Sharding>& leaves, const std::vector<int>& outputs,
                    const std::vector<int>& devices = {});

}  // namespace autoshard
