// StrategyProblem: AutoShard's question about one traced step on one mesh,
// posed as a ShardingProblem (the IOPDDL form that `autoshard solve` reads).
//
//   node      every value of the step graph: a weight, optimizer slot or
//             input (its layout), or an op (its strategy: one LoopSplit of
//             the op's own LoopNest, i.e. which of its loops go on which
//             mesh axis)
//   node cost the op's compute time on device 0's block under the strategy
//             (the cost model's op_seconds)
//   edge cost the resharding from the producer's output layout to the
//             layout the consumer needs, priced from the partitioner's own
//             conversion plan (conversion_seconds); a state input the op
//             updates in another layout is also converted back
//   staging   a value read by two or more ops in one part of the step (a
//             block's forward or backward pass) is converted once for them
//             all, as the partitioner does: a node with no cost whose
//             strategy is the layout it passes through (the value's own:
//             none), each reader converting on from there
//   usage     device 0's bytes of the value, live from its producer to its
//             last user (weights, slots and inputs: the whole step); the
//             limit is the memory per device left after the process itself
//   ties      repeated blocks (transformer layers: Node::block) with the same
//             structure share one problem node per position: costs add up,
//             and memory follows the members over the step (saved
//             activations pile up through the forward pass, gradients
//             through the backward), bounded from above by a few pieces
//             within a tenth of the class's largest count; each further
//             piece is a node tied one-to-one to the class's (no cost, the
//             same strategy), which the solver merges back into one decision
//             and which has no members here
//
// Costs are integer nanoseconds, usages bytes. `request` turns the solver's
// answer into the partitioner's input, so what was priced is what runs.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autoshard/ir/graph.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/shard/partitioner.h"
#include "autoshard/shared_list.h"
#include "autoshard/solver/problem.h"

namespace autoshard {

struct StrategyOptions {
  bool bf16 = false;
  // Bytes each device may hold (0: the cluster's device memory, less the
  // process's own).
  double memory_per_device = 0;
  // Leaves whose layout is given (the batch split of inputs); the rest are chosen.
  std::map<int, Sharding> fixed = {};
  // Weights, optimizer state and inputs only split where the axis divides the
  // dimension (JAX's NamedSharding, hence Keras's LayoutMap, requires it):
  // layouts with an uneven_dims are no candidates. Ops inside the step may
  // still split unevenly (XLA pads them).
  bool divisible = false;
};

// The dimensions of `shape` that `layout` splits over an axis whose size does
// not divide them (array_split's uneven blocks); empty when every split
// divides. The one rule behind StrategyOptions::divisible.
std::vector<int> uneven_dims(const Sharding& layout, const Shape& shape, const DeviceMesh& mesh);

// One problem node's strategies, read as a const std::vector<ShardDecision>.
// Shared: the nodes of one loop nest (a model's layers, a tied node's
// pieces) have one list, and copying it into every node was a tenth of
// posing GPT-3 175B's problems on a mesh (and of freeing them).
using Strategies = SharedList<ShardDecision>;

struct StrategyProblem {
  ShardingProblem problem;
  // Per problem node: the step graph's nodes that take its strategy (one,
  // or the same node of every repeated block: see Node::block; none for the
  // further pieces of a tied node's memory).
  std::vector<std::vector<int>> members;
  std::vector<bool> leaf;  // per problem node: weights, slots or inputs
  // Per problem node, per strategy: the shardings the op runs with (for a
  // leaf or a staging node: its layout, as `output`).
  std::vector<Strategies> choices;
  // Inputs read through a staging node (see build_strategy_problem): the
  // step graph's consumer, its input, and the staging problem node.
  struct Staged {
    int consumer, input, stage;
  };
  std::vector<Staged> staged;

  // The partitioner's input for an answer (one strategy per problem node).
  PartitionRequest request(const std::vector<int>& strategy) const;
  // Strategy `s` of problem node `i` in words: "[data, -] partial(model) from [data, -], [-,
  // model]".
  std::string describe(const DeviceMesh& mesh, int i, int s) const;
};

StrategyProblem build_strategy_problem(const Graph& g, const DeviceMesh& mesh,
                                       const Cluster& cluster, const StrategyOptions& options);

}  // namespace autoshard
