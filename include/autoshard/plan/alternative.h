// What a plan would cost with one decision changed: the numbers behind
// AutoShard's explanations ("next best [model, -]: +0.041 ms, +0.0 MiB per
// device"), taken from the problem the solver answered.
//
// Problem node `node` goes to strategy `s`, the rest of the plan held, except
// the problem nodes that carry no decision of their own around it: the
// further pieces of a tied node's memory follow it (they are the same
// decision), and each staging node it feeds (a value read by several ops of
// one part of the step is converted once, see strategy_problem.h) takes its
// cheapest layout for the new value layout and the readers held, as the
// solver would: the conversion from the new layout into the staged one is
// priced, not dropped.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/plan/strategy_problem.h"

namespace autoshard {

struct Alternative {
  std::vector<int> strategy;  // the whole plan with the change
  // problem.cost(strategy) - problem.cost(chosen): nanoseconds per step
  // (kForbiddenCost or more: the change is forbidden).
  int64_t cost_change = 0;
  // Bytes per device at the node's largest piece of memory.
  int64_t memory_change = 0;
};

class PlanAlternatives {
 public:
  // `chosen`: one strategy per problem node of `sp` (kept by reference with `sp`).
  PlanAlternatives(const StrategyProblem& sp, const std::vector<int>& chosen);

  // The plan with problem node `node` at strategy `s`.
  Alternative of(int node, int s) const;

 private:
  // Nodes whose strategy follows `node`'s and staging nodes it feeds.
  void neighbours(int node, std::vector<int>& pieces, std::vector<int>& stages) const;
  // Cost of the node's own strategy plus its edges', under `strategy`.
  __int128 local_cost(const std::vector<int>& changed, const std::vector<int>& strategy) const;

  const StrategyProblem& sp_;
  const std::vector<int>& chosen_;
  std::vector<std::vector<int>> edges_of_;  // per problem node
  std::vector<bool> stage_;                 // per problem node: a staging node
};

}  // namespace autoshard
