// AutoShard's explanations are the solver's own numbers: the time a rejected
// layout would add is the problem's cost of the plan with that layout, the
// rest held, against the plan chosen; for a value read through a staging
// node (one conversion shared by several readers) that includes converting
// the new layout into the staged one, which the explanations once dropped.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/plan/alternative.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/solver/solver.h"

namespace autoshard {
namespace {

Graph gpt2_step() {
  GPT2 model(GPT2Config::preset("test"), 8, 0);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  return model.training_graph({4, 8}, {4, 8});
}

// The staging nodes a problem node feeds.
std::vector<int> stages_fed_by(const StrategyProblem& sp, int node) {
  std::set<int> stages;
  for (const auto& s : sp.staged) stages.insert(s.stage);
  std::vector<int> out;
  for (const auto& e : sp.problem.edges) {
    if (e.u == node && stages.count(e.v)) out.push_back(e.v);
    if (e.v == node && stages.count(e.u)) out.push_back(e.u);
  }
  return out;
}

// The cost change of `node` at `s`, re-solved: every problem node pinned to
// the plan (`node` to s, its memory pieces with it) except the staging nodes
// it feeds, which the solver chooses; no memory limit (the change may not fit,
// its time is still asked for).
int64_t resolved_change(const StrategyProblem& sp, const std::vector<int>& chosen, int node,
                        int s) {
  ShardingProblem q = sp.problem;
  q.usage_limit.reset();
  std::vector<int> pinned = chosen;
  pinned[node] = s;
  const std::vector<int> free = stages_fed_by(sp, node);
  for (const auto& e : q.edges)  // pieces of its memory: no decision of their own
    if (e.u == node && sp.members[e.v].empty() &&
        std::find(free.begin(), free.end(), e.v) == free.end())
      pinned[e.v] = s;
  for (size_t n = 0; n < q.nodes.size(); ++n) {
    if (std::find(free.begin(), free.end(), int(n)) != free.end()) continue;
    for (size_t t = 0; t < q.nodes[n].cost.size(); ++t)
      if (int(t) != pinned[n]) q.nodes[n].cost[t] = kForbiddenCost;
  }
  const SolveResult r = solve(q, {.time_limit_s = 600, .max_rounds = 2, .programs = false});
  EXPECT_TRUE(r.feasible) << r.why;
  return int64_t(sp.problem.cost(r.strategy) - sp.problem.cost(chosen));
}

// Every weight read through a staging node, every other layout: the
// explained change is the problem's cost difference between the two plans,
// and re-solving with the layout pinned (the staging nodes free) finds it.
TEST(PlannerExplanation, ChangesThroughStagingNodesAreTheProblemsOwn) {
  const Graph g = gpt2_step();
  const DeviceMesh mesh({2, 2}, {"data", "model"});
  StrategyOptions so;
  for (int id : g.inputs()) so.fixed[id] = DataParallel(mesh).input_layout(g.node(id).shape);
  const StrategyProblem sp = build_strategy_problem(g, mesh, Cluster::named("a100-80g"), so);
  const SolveResult r =
      solve(sp.problem, {.time_limit_s = 600, .max_rounds = 2, .programs = false});
  ASSERT_TRUE(r.feasible) << r.why;
  const PlanAlternatives alternatives(sp, r.strategy);
  int checked = 0, through_conversion = 0;
  for (size_t i = 0; i < sp.members.size(); ++i) {
    if (!sp.leaf[i] || sp.members[i].empty() || stages_fed_by(sp, int(i)).empty()) continue;
    for (int s = 0; s < int(sp.choices[i].size()); ++s) {
      if (s == r.strategy[i]) continue;
      const Alternative a = alternatives.of(int(i), s);
      if (a.cost_change >= kForbiddenCost) continue;
      EXPECT_EQ(a.cost_change, int64_t(sp.problem.cost(a.strategy) - sp.problem.cost(r.strategy)));
      EXPECT_EQ(a.cost_change, resolved_change(sp, r.strategy, int(i), s))
          << g.node(sp.members[i][0]).leaf().name << " at "
          << sp.choices[i][s].output.to_string(mesh);
      // What the explanations said before: the staging edges skipped.
      int64_t skipped = sp.problem.nodes[i].cost[s] - sp.problem.nodes[i].cost[r.strategy[i]];
      through_conversion += a.cost_change != skipped;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0) << "no weight is read through a staging node";
  EXPECT_GT(through_conversion, 0) << "no change passes through a staged conversion";
}

// The line `autoshard plan` prints for a weight read through a staging node
// carries the re-solved number.
TEST(PlannerExplanation, AStagedWeightsLineCarriesTheResolvedChange) {
  const Graph g = gpt2_step();
  const DeviceMesh mesh({2, 2}, {"data", "model"});
  AutoShardOptions o;
  o.cluster = "a100-80g";
  o.deterministic = true;
  o.time_limit_s = 0.5;
  AutoShard planner(mesh, "data", o);
  planner.prepare(g);
  StrategyOptions so;
  for (int id : g.inputs()) so.fixed[id] = planner.input_layout(g.node(id).shape);
  const StrategyProblem sp = build_strategy_problem(g, mesh, Cluster::named("a100-80g"), so);
  ASSERT_EQ(sp.problem.to_json(), planner.problem().to_json()) << "posed differently";
  const std::vector<int>& chosen = planner.solution();
  // A weight read through a staging node (several readers in one part of
  // the step): wte.embeddings where the model reads it so, else the first.
  int wte = -1;
  for (size_t i = 0; i < sp.members.size(); ++i) {
    if (!sp.leaf[i] || sp.members[i].empty() || stages_fed_by(sp, int(i)).empty()) continue;
    if (!g.node(sp.members[i][0]).is_weight()) continue;
    if (wte < 0 || g.node(sp.members[i][0]).leaf().name == "wte.embeddings") wte = int(i);
  }
  ASSERT_GE(wte, 0) << "no weight is read through a staging node";
  const std::string name = g.node(sp.members[wte][0]).leaf().name;
  int best = -1;
  int64_t best_change = 0;
  for (int s = 0; s < int(sp.choices[wte].size()); ++s) {
    if (s == chosen[wte]) continue;
    const int64_t change = resolved_change(sp, chosen, wte, s);
    if (change < kForbiddenCost && (best < 0 || change < best_change))
      best = s, best_change = change;
  }
  ASSERT_GE(best, 0);
  char ms[32];
  std::snprintf(ms, sizeof ms, "%s%.3f ms", best_change >= 0 ? "+" : "", double(best_change) / 1e6);
  const std::string expected =
      "; next best " + sp.choices[wte][best].output.to_string(mesh) + ": " + ms + ",";
  bool found = false;
  for (const std::string& line : planner.reasons())
    if (line.rfind(name + " ", 0) == 0) {
      found = true;
      EXPECT_NE(line.find(expected), std::string::npos) << line << "\nexpected: " << expected;
    }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace autoshard
