// Activation recomputation: a graph rewrite that trades compute for memory.
// The forward ops of each region (a transformer block) are traced again
// just before the first gradient op that needs them, and the gradient ops
// use those copies; the originals then die as soon as the forward pass is
// done with them, so only each region's inputs stay live across the step.
// Kernels are deterministic (dropout keys by step and element), so the
// numbers are exactly those of the step without recomputation.
#pragma once

#include <vector>

#include "autoshard/ir/graph.h"

namespace autoshard {

struct Recomputed {
  Graph graph;
  std::vector<int> id_of;  // old node id -> id in the new graph
};

// `loss` is the last forward node: nodes after it are the backward pass and
// the optimizer update.
Recomputed recompute_regions(const Graph& g, int loss);

}  // namespace autoshard
