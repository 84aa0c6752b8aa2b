#include "autoshard/plan/alternative.h"

#include <algorithm>

#include "autoshard/error.h"

namespace autoshard {

PlanAlternatives::PlanAlternatives(const StrategyProblem& sp, const std::vector<int>& chosen)
    : sp_(sp),
      chosen_(chosen),
      edges_of_(sp.problem.nodes.size()),
      stage_(sp.problem.nodes.size(), false) {
  AS_CHECK(chosen.size() == sp.problem.nodes.size(), "PlanAlternatives: ", chosen.size(),
           " strategies for ", sp.problem.nodes.size(), " nodes");
  for (size_t e = 0; e < sp.problem.edges.size(); ++e) {
    edges_of_[sp.problem.edges[e].u].push_back(int(e));
    edges_of_[sp.problem.edges[e].v].push_back(int(e));
  }
  for (const StrategyProblem::Staged& s : sp.staged) stage_[s.stage] = true;
}

void PlanAlternatives::neighbours(int node, std::vector<int>& pieces,
                                  std::vector<int>& stages) const {
  for (int e : edges_of_[node]) {
    const ShardingProblem::Edge& edge = sp_.problem.edges[e];
    const int other = edge.u == node ? edge.v : edge.u;
    if (!sp_.members[other].empty()) continue;  // a decision of its own: held
    (stage_[other] ? stages : pieces).push_back(other);
  }
}

__int128 PlanAlternatives::local_cost(const std::vector<int>& changed,
                                      const std::vector<int>& strategy) const {
  const ShardingProblem& p = sp_.problem;
  __int128 cost = 0;
  std::vector<int> seen;  // edges between two changed nodes count once
  for (int n : changed) {
    cost += p.nodes[n].cost[strategy[n]];
    for (int e : edges_of_[n]) {
      if (std::find(seen.begin(), seen.end(), e) != seen.end()) continue;
      seen.push_back(e);
      const ShardingProblem::Edge& edge = p.edges[e];
      cost += edge.cost[size_t(strategy[edge.u]) * p.nodes[edge.v].cost.size() +
                        size_t(strategy[edge.v])];
    }
  }
  return cost;
}

Alternative PlanAlternatives::of(int node, int s) const {
  const ShardingProblem& p = sp_.problem;
  Alternative a;
  a.strategy = chosen_;
  a.strategy[node] = s;
  std::vector<int> pieces, stages;
  neighbours(node, pieces, stages);
  for (int piece : pieces) a.strategy[piece] = s;
  // Each staging node: its cheapest layout with the value at s and its
  // readers held (staging nodes only touch their value and its readers).
  for (int stage : stages) {
    int best_t = chosen_[stage];  // kept on a tie
    __int128 best = local_cost({stage}, a.strategy);
    for (int t = 0; t < int(p.nodes[stage].cost.size()); ++t) {
      a.strategy[stage] = t;
      const __int128 c = local_cost({stage}, a.strategy);
      if (c < best) best = c, best_t = t;
    }
    a.strategy[stage] = best_t;
  }
  std::vector<int> changed = {node};
  changed.insert(changed.end(), pieces.begin(), pieces.end());
  changed.insert(changed.end(), stages.begin(), stages.end());
  const __int128 change = local_cost(changed, a.strategy) - local_cost(changed, chosen_);
  a.cost_change = int64_t(std::clamp<__int128>(change, -kForbiddenCost, kForbiddenCost));
  int largest = node;
  for (int piece : pieces)
    if (p.nodes[piece].usage[chosen_[node]] > p.nodes[largest].usage[chosen_[node]])
      largest = piece;
  a.memory_change = p.nodes[largest].usage[s] - p.nodes[largest].usage[chosen_[node]];
  return a;
}

}  // namespace autoshard
