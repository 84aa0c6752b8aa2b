#include "autoshard/ir/recompute.h"

#include <algorithm>

namespace autoshard {

Recomputed recompute_regions(const Graph& g, int loss) {
  const int n = g.size();
  // Each region's forward ops (leaves are shared, never copied).
  std::vector<std::vector<int>> forward(g.regions());
  for (int i = 0; i <= loss && i < n; ++i) {
    const Node& node = g.node(i);
    if (node.region >= 0 && !node.is_leaf()) forward[node.region].push_back(i);
  }
  Recomputed out;
  out.id_of.assign(n, -1);
  std::vector<int> copy_of(n, -1);  // forward value -> its recomputed copy
  std::vector<char> recomputed(g.regions(), 0);
  // The forward pass keeps its regions; recomputed copies join the gradient
  // ops outside them, in their block (for the planner). So the partitioner
  // converts a value again for the backward pass instead of keeping the
  // forward pass's copy alive until then (see Partition's reshard).
  auto append = [&](const Node& node, const std::vector<int>& from, bool forward) {
    std::vector<Value> ins;
    for (int in : node.inputs) ins.push_back(out.graph.value(from[in]));
    out.graph.set_region(forward ? node.region : -1);
    out.graph.set_block(node.block);
    const int id = out.graph.add(node.op, ins, node.attrs).id;
    out.graph.set_region(-1);
    out.graph.set_block(-1);
    return id;
  };
  for (int i = 0; i < n; ++i) {
    const Node& node = g.node(i);
    if (i > loss) {
      // A gradient op: recompute every region it reads from that has not
      // been yet, then read the copies.
      for (int in : node.inputs) {
        const int r = g.node(in).region;
        if (r < 0 || g.node(in).is_leaf() || recomputed[r]) continue;
        recomputed[r] = 1;
        std::vector<int> from = out.id_of;
        for (int f : forward[r]) {
          from[f] = copy_of[f] = append(g.node(f), from, false);
        }
      }
      std::vector<int> from = out.id_of;
      for (int in : node.inputs)
        if (copy_of[in] >= 0) from[in] = copy_of[in];
      out.id_of[i] = append(node, from, false);
      continue;
    }
    out.id_of[i] = append(node, out.id_of, true);
  }
  return out;
}

}  // namespace autoshard
