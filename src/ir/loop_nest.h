// LoopNest: the planner's view of one op, its iteration space written as
// loops (einsum letters, generalised to every primitive). Splitting a loop
// over a mesh axis splits every input and output dimension the loop indexes;
// a split reduction loop leaves the output partial over that axis (sums or
// maxima, to be combined by a collective); a whole loop is never split (the
// axis a softmax or a layer norm reduces over inside its kernel).
//
// From a LoopNest alone follow the dimensions an op ties together (AutoShard
// groups them), its candidate strategies on a mesh, and the shardings each
// strategy needs of its inputs and gives its output.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/reduce_op.h"
#include "autoshard/tensor/sharding.h"
#include "ir/shard_rule.h"

namespace autoshard {

struct Loop {
  enum class Kind : uint8_t { Parallel, Reduction, Whole };
  int64_t extent = 1;
  Kind kind = Kind::Parallel;
  ReduceOp reduce = ReduceOp::Sum;  // a reduction's partial results combine so
};

struct LoopNest {
  std::vector<Loop> loops;
  std::vector<std::vector<int>> inputs;  // per input, per dimension: its loop, or -1
  std::vector<int> output;               // per output dimension: its loop, or -1

  // Input dims read through a window of a loop (a convolution's rows read
  // by its output rows): `inputs` names the loop, so a split of the loop
  // splits the dim too, and each device then needs the rows its part of the
  // loop reads (OpDef::window): its band plus a halo from its neighbours,
  // which the partitioner brings with a HaloExchange.
  struct Halo {
    int input = 0, dim = 0;
  };
  std::vector<Halo> halos;

  int add(Loop loop) {
    loops.push_back(loop);
    return static_cast<int>(loops.size()) - 1;
  }
  bool splittable(int loop) const {
    return loops[loop].kind != Loop::Kind::Whole && loops[loop].extent > 1;
  }
  // Whether an input reads a window of this loop (a halo dimension): such a
  // loop splits over one mesh axis only, never a tuple.
  bool windowed(int loop) const;
};

// A strategy: for each loop, the axis id it is split over (a mesh axis or a
// tuple of them), or -1.
using LoopSplit = std::vector<int>;

// The input and output shardings of a strategy. Inputs never carry partial
// sums; the output is partial over the axes of split reduction loops.
ShardDecision decide(const LoopNest& nest, const LoopSplit& split);

// The strategy that keeps as many of the inputs' splits as the nest allows
// (inputs in order, dims in order, each axis once): a sharding rule for ops
// whose loops say everything.
ShardDecision follow_inputs(const LoopNest& nest, const std::vector<Sharding>& inputs);

// The axis ids a strategy may split loops over: every mesh axis of size > 1,
// then the tuple of all of them, in mesh order (a batch over data x model, a
// weight over every device). Other tuples are for layouts given by hand.
std::vector<int> split_axes(const DeviceMesh& mesh);

// Every strategy on `mesh`: each axis id of split_axes over at most one
// splittable loop, at most one per loop, no mesh axis twice (a tuple and
// its members exclude each other), plus leaving it unused; a tuple only on
// the loops `tuple_loops` marks (null: any). The first strategy is the fully
// replicated one.
std::vector<LoopSplit> enumerate_splits(const LoopNest& nest, const DeviceMesh& mesh,
                                        const std::vector<bool>* tuple_loops = nullptr);

// The sets of inputs that may carry partial sums together for an op of this
// linearity (add: all of them; mul: any one; div: the numerator).
std::vector<std::vector<int>> partial_carriers(Linearity linearity, int inputs);
// Whether an op of this linearity may run on `inputs` (partial sums in
// allowed carriers only, the same axes in each) and leave `output`, partial
// over at least those axes.
bool takes_partial(Linearity linearity, const std::vector<Sharding>& inputs,
                   const Sharding& output);

// Every strategy as the shardings it runs with: one per split, and for a
// linear op (OpDef::linearity) also, for each split that leaves its output
// whole or partial sums and each mesh axis it does not use, the same split
// run with each allowed set of inputs partial over that axis (its output
// then partial over that axis too, beside its own split sums). The first is
// the fully replicated one.
std::vector<ShardDecision> enumerate_strategies(const LoopNest& nest, const DeviceMesh& mesh,
                                                Linearity linearity,
                                                const std::vector<bool>* tuple_loops = nullptr);

// Per node of `g`, per dimension: whether the ops' loops tie it to dimension
// `dim` of one of the graph's inputs of rank above `dim` (0: the batch, 1:
// the sequence of [batch, sequence] tokens), following the graph in order.
std::vector<std::vector<bool>> dims_tied_to_inputs(const Graph& g, int dim);
// The loops of node `id`'s nest that index a dimension `tied` marks.
std::vector<bool> tied_loops(const Graph& g, int id, const LoopNest& nest,
                             const std::vector<std::vector<bool>>& tied);

}  // namespace autoshard
