// Memory as the executor holds it and as the planner counts it: the buffer
// plan never puts two values that are live at once into one buffer and stays
// near its lower bound (the most bytes live at any moment); AutoShard's
// problem, with the repeated layers tied into one decision, counts what the
// executor will hold.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <map>
#include <random>

#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/solver/solver.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

GPT2Config deep_config() {
  GPT2Config cfg = GPT2Config::preset("test");
  cfg.n_layer = 8;  // enough layers for their memory to pile up
  return cfg;
}

Partition megatron_partition(bool recompute) {
  GPT2 model(deep_config(), 6, 0);
  model.set_recompute(recompute);
  model.set_distribution(std::make_shared<ModelParallel>(DeviceMesh({2, 2}, {"data", "model"}),
                                                         gpt2_megatron_layout()));
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  return model.plan_training({4, 6}, {4, 6});
}

// Each value's bytes and [first, last] node (its producer to its last reader,
// through views and the sums folded into an operand's buffer), worked out
// here independently of the executor's liveness.
struct Lifetime {
  size_t bytes;
  int first, last;
};

std::map<int, Lifetime> lifetimes(const Graph& g, const BufferPlan& plan,
                                  const std::vector<int>& outputs) {
  std::vector<int> root(g.size());
  std::map<int, Lifetime> out;
  for (int i : plan.schedule) {
    const Node& n = g.node(i);
    const int shares = op_def(n.op).aliases_input ? n.inputs[0]
                       : plan.sum_view[i] >= 0    ? plan.sum_view[i]
                                                  : plan.adds_into[i];
    root[i] = shares >= 0 ? root[shares] : i;
    if (!n.is_leaf() && root[i] == i)
      out[i] = {std::max<size_t>(4, numel(n.shape) * dtype_size(n.dtype)), i, i};
    for (int in : n.inputs)
      if (auto it = out.find(root[in]); it != out.end()) it->second.last = i;
    if (auto it = out.find(root[i]); it != out.end())
      it->second.last = std::max(it->second.last, i);
  }
  for (int o : outputs)
    if (auto it = out.find(root[o]); it != out.end()) it->second.last = INT_MAX;
  return out;
}

TEST(BufferPlan, LiveValuesNeverShareABufferAndTheTotalIsNearTheMostLiveAtOnce) {
  for (bool recompute : {false, true}) {
    const Partition p = megatron_partition(recompute);
    const Graph& g = p.local[0];
    const BufferPlan plan = plan_buffers(g, p.outputs[0]);
    const std::map<int, Lifetime> values = lifetimes(g, plan, p.outputs[0]);
    std::vector<std::vector<int>> by_slot(plan.slot_bytes.size());
    for (const auto& [id, v] : values) {
      const int slot = plan.slot_of[id];
      ASSERT_GE(slot, 0) << op_name(g.node(id).op) << " has no buffer";
      EXPECT_GE(plan.slot_bytes[slot], v.bytes);
      for (int other : by_slot[slot]) {
        const Lifetime& w = values.at(other);
        EXPECT_TRUE(v.last < w.first || w.last < v.first)
            << "node " << id << " and node " << other << " are live together in buffer " << slot;
      }
      by_slot[slot].push_back(id);
    }
    // The lower bound: the most bytes live at one moment.
    std::map<int64_t, int64_t> change;
    for (const auto& [id, v] : values) {
      change[v.first] += int64_t(v.bytes);
      if (v.last != INT_MAX) change[int64_t(v.last) + 1] -= int64_t(v.bytes);
    }
    int64_t live = 0, most = 0;
    for (const auto& [t, d] : change) most = std::max(most, live += d);
    // Buffers are whole (no offsets into a shared arena), so small models
    // with many sizes land above the bound: 1.32x here without recompute,
    // 1.06x with (filling them in schedule order gave 1.83x and 1.30x);
    // GPT-3 175B's per-device program: 1.003x.
    EXPECT_GE(double(plan.total_bytes()), double(most));
    EXPECT_LE(double(plan.total_bytes()), (recompute ? 1.1 : 1.4) * double(most));
  }
}

// The tied layers' saved activations pile up through the forward pass and
// their gradients through the backward pass: counted at one moment, the
// problem missed one or the other. Counted over time, its peak is the
// executor's for the plan it chose, up to the copies conversions make.
TEST(AutoShardPlan, TiedLayersCountTheirMemoryOverTheStep) {
  GPT2Config cfg = deep_config();
  cfg.n_embd = 96;  // weights big enough for their gradients to count
  GPT2 model(cfg, 16, 0);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const Graph g = model.training_graph({8, 16}, {8, 16});
  const Cluster cluster = Cluster::named("a100-80g");
  for (const DeviceMesh& mesh : {DeviceMesh({4}, {"data"}), DeviceMesh({2, 2}, {"data", "model"}),
                                 DeviceMesh({1, 3}, {"data", "model"})}) {
    StrategyOptions so;
    for (int id : g.inputs()) so.fixed[id] = DataParallel(mesh).input_layout(g.node(id).shape);
    // Unbounded, then under a budget that forces weights or state apart:
    // halfway between the free plan's count and the least any plan needs.
    double free_peak = 0;
    for (bool bounded : {false, true}) {
      if (bounded) {
        const ShardingProblem& free = build_strategy_problem(g, mesh, cluster, so).problem;
        std::vector<int> smallest;
        for (const auto& node : free.nodes)
          smallest.push_back(
              int(std::min_element(node.usage.begin(), node.usage.end()) - node.usage.begin()));
        so.memory_per_device = (free_peak + double(free.peak_usage(smallest))) / 2;
        ASSERT_LT(so.memory_per_device, free_peak) << "no budget in between";
      }
      const StrategyProblem sp = build_strategy_problem(g, mesh, cluster, so);
      size_t tied = 0;
      for (const auto& m : sp.members) tied += m.size() > 1;
      EXPECT_GT(tied, 0u) << "the layers are not tied";
      // Rounds, not seconds: the same answer under the sanitizers.
      const SolveResult r =
          solve(sp.problem, {.time_limit_s = 600, .max_rounds = 4, .programs = false});
      ASSERT_TRUE(r.feasible) << r.why;
      const Partition p = partition(g, mesh, sp.request(r.strategy), {}, {0});
      const StepPrediction real = predict(p, cluster, {});
      const double held = real.memory.total() - real.memory.process;
      const double counted = double(sp.problem.peak_usage(r.strategy));
      if (!bounded) free_peak = counted;
      EXPECT_GT(counted, 0.8 * held) << mesh.to_string();
      EXPECT_LT(counted, 1.2 * held) << mesh.to_string();
    }
  }
}

// The problem's memory against the exact count, value by value over its live
// range, for random plans: never below it (tied layers included), and not
// far above.
TEST(AutoShardPlan, TiedMemoryBoundsTheExactCountFromAbove) {
  GPT2 model(deep_config(), 6, 0);
  model.set_recompute(true);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const Graph g = model.training_graph({4, 6}, {4, 6});
  const DeviceMesh mesh({2, 2}, {"data", "model"});
  const StrategyProblem sp = build_strategy_problem(g, mesh, Cluster::named("a100-80g"), {});
  // Live ranges as the planner defines them: leaves for the whole step, an
  // op's value from itself to its last reader (through views).
  const int n = g.size();
  std::vector<int> last(n, -1);
  for (int i = 0; i < n; ++i)
    for (int in : g.node(i).inputs) last[in] = std::max(last[in], i);
  for (int i = n - 1; i >= 0; --i)
    if (!g.node(i).is_leaf() && op_def(g.node(i).op).aliases_input)
      for (int in : g.node(i).inputs) last[in] = std::max(last[in], last[i]);
  std::vector<int> class_of(n);
  for (size_t q = 0; q < sp.members.size(); ++q)
    for (int i : sp.members[q]) class_of[i] = int(q);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> strategy(sp.problem.nodes.size());
    for (size_t q = 0; q < strategy.size(); ++q)
      strategy[q] = int(rng() % sp.problem.nodes[q].cost.size());
    for (const auto& e : sp.problem.edges)  // pieces follow their class
      if (sp.members[e.v].empty()) strategy[e.v] = strategy[e.u];
    std::vector<int64_t> change(n + 2, 0);
    for (int i = 0; i < n; ++i) {
      const Node& node = g.node(i);
      if (!node.is_leaf() && op_def(node.op).aliases_input) continue;
      const ShardDecision& d = sp.choices[class_of[i]][strategy[class_of[i]]];
      const int64_t bytes = numel(d.output.local_shape(node.shape, mesh, 0)) * 4;
      const int lo = node.is_leaf() ? 0 : i, hi = node.is_leaf() ? n : std::max(i + 1, last[i] + 1);
      change[lo] += bytes, change[hi] -= bytes;
    }
    int64_t live = 0, exact = 0;
    for (int64_t c : change) exact = std::max(exact, live += c);
    const int64_t counted = sp.problem.peak_usage(strategy);
    EXPECT_GE(counted, exact) << "trial " << trial;
    EXPECT_LE(double(counted), 1.2 * double(exact)) << "trial " << trial;
  }
}

}  // namespace
}  // namespace autoshard
