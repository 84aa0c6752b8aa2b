// What the planner checks before lowering a plan on a large mesh:
// memory_floor (plan/cost_model.h) is never above the memory predict() gives
// the lowered program, so AutoShard, which rejects an answer whose floor is
// over the budget without lowering it, never rejects one that fits; and the
// partitioned program's collectives share their block sizes (BlockSizes).
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/nn/conv_layers.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/pooling_layers.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/solver/solver.h"
#include "autoshard/tensor/array_split.h"

namespace autoshard {
namespace memory_floor_test {

Graph training_graph(bool recompute, int64_t batch) {
  GPT2Config cfg = GPT2Config::preset("test");
  cfg.n_layer = 3;
  GPT2 model(cfg, 6, 0);
  model.set_recompute(recompute);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  return model.training_graph({batch, 6}, {batch, 6});
}

double predicted_memory(const Graph& g, const DeviceMesh& mesh, const PartitionRequest& r,
                        bool bf16) {
  const StepPrediction p =
      predict(partition(g, mesh, r, {}, {0}), Cluster::named("a100-80g"), {bf16});
  return p.memory.total() - p.memory.process;
}

// A random answer with no forbidden conversion: node by node, a strategy
// whose edges to the nodes chosen before are allowed (the tied pieces, whose
// edges allow their class's strategy alone, follow it); empty when a node
// has none left after a few tries.
std::vector<int> random_answer(const Graph& g, const StrategyProblem& sp, std::mt19937& rng) {
  const ShardingProblem& p = sp.problem;
  // In the step's order: a node where its first member is, a staging node
  // just after the value it stages, a tied piece last.
  std::vector<double> at(p.nodes.size(), 1e9);
  for (size_t q = 0; q < p.nodes.size(); ++q)
    for (int m : sp.members[q]) at[q] = std::min(at[q], double(m));
  for (const StrategyProblem::Staged& st : sp.staged)
    at[size_t(st.stage)] = double(g.node(st.consumer).inputs[size_t(st.input)]) + 0.5;
  std::vector<size_t> order(p.nodes.size());
  for (size_t q = 0; q < order.size(); ++q) order[q] = q;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return at[a] < at[b]; });
  std::vector<std::vector<std::pair<size_t, bool>>> edges(p.nodes.size());  // (edge, node is u)
  for (size_t e = 0; e < p.edges.size(); ++e) {
    edges[size_t(p.edges[e].u)].push_back({e, true});
    edges[size_t(p.edges[e].v)].push_back({e, false});
  }
  for (int attempt = 0; attempt < 20; ++attempt) {
    std::vector<int> s(p.nodes.size(), -1);
    bool stuck = false;
    for (size_t q : order) {
      std::vector<int> allowed;
      for (int a = 0; a < int(p.nodes[q].cost.size()); ++a) {
        bool ok = p.nodes[q].cost[size_t(a)] < kForbiddenCost;
        for (const auto& [e, is_u] : edges[q]) {
          const auto& edge = p.edges[e];
          const int other = s[size_t(is_u ? edge.v : edge.u)];
          if (other < 0) continue;
          const size_t width = p.nodes[size_t(edge.v)].cost.size();
          const size_t cell =
              is_u ? size_t(a) * width + size_t(other) : size_t(other) * width + size_t(a);
          ok = ok && edge.cost[cell] < kForbiddenCost;
        }
        if (ok) allowed.push_back(a);
      }
      if (allowed.empty()) {
        stuck = true;
        break;
      }
      s[q] = allowed[rng() % allowed.size()];
    }
    if (!stuck) return s;
  }
  return {};
}

// Random answers, the solver's, and data parallelism (no decisions), on
// meshes of one to three axes, splits even and uneven (a batch of 3 over 2
// or 4), with and without recomputation and bf16: the floor never above the
// prediction, and not far below it on the solver's answers.
TEST(MemoryFloor, NeverAboveThePredictedMemory) {
  const Cluster cluster = Cluster::named("a100-80g");
  std::mt19937 rng(59);
  int checked = 0, random = 0;
  for (const bool recompute : {false, true})
    for (const int64_t batch : {int64_t{4}, int64_t{3}})
      for (const DeviceMesh& mesh :
           {DeviceMesh({4}, {"data"}), DeviceMesh({2, 2}, {"data", "model"}),
            DeviceMesh({1, 4}, {"data", "model"}),
            DeviceMesh({2, 2, 2}, {"data", "model", "seq"})}) {
        const Graph g = training_graph(recompute, batch);
        StrategyOptions so;
        for (int id : g.inputs()) so.fixed[id] = DataParallel(mesh).input_layout(g.node(id).shape);
        const StrategyProblem sp = build_strategy_problem(g, mesh, cluster, so);
        // The solver's (rounds, not seconds: the same answers under the
        // sanitizers), then under budgets that force more apart, then random.
        std::vector<std::vector<int>> answers;
        ShardingProblem bounded = sp.problem;
        const SolveOptions rounds{.time_limit_s = 600, .max_rounds = 2, .programs = false};
        answers.push_back(solve(bounded, rounds).strategy);
        const int64_t free_peak = bounded.peak_usage(answers[0]);
        for (const double share : {0.7, 0.5}) {
          bounded.usage_limit = int64_t(share * double(free_peak));
          if (const SolveResult r = solve(bounded, rounds); r.feasible)
            answers.push_back(r.strategy);
        }
        for (int k = 0; k < 3; ++k)
          if (std::vector<int> a = random_answer(g, sp, rng); !a.empty()) {
            ASSERT_LT(sp.problem.cost(a), kForbiddenCost);
            answers.push_back(std::move(a));
            ++random;
          }
        for (size_t a = 0; a < answers.size(); ++a)
          for (const bool bf16 : {false, true}) {
            const PartitionRequest r = sp.request(answers[a]);
            const double floor = memory_floor(g, mesh, r, bf16);
            const double real = predicted_memory(g, mesh, r, bf16);
            EXPECT_LE(floor, real) << mesh.to_string() << " answer " << a << " recompute "
                                   << recompute << " batch " << batch << " bf16 " << bf16;
            if (a == 0) {
              EXPECT_GT(floor, 0.25 * real) << mesh.to_string() << " (solver's answer)";
            }
            ++checked;
          }
        PartitionRequest data_parallel = sp.request(answers[0]);
        data_parallel.decisions.clear();
        for (int id : g.parameters()) data_parallel.leaves.erase(id);
        EXPECT_LE(memory_floor(g, mesh, data_parallel, true),
                  predicted_memory(g, mesh, data_parallel, true));
      }
  EXPECT_GE(checked, 2 * 2 * 4 * 2);
  EXPECT_GE(random, 2 * 2 * 4);  // most meshes had some
}

// A small CNN whose convolutions exchange halos where a plan splits the
// image's rows: a strided 1x1 convolution that widens the channels (its
// halo is smaller than its converted input) and a 3x3 one.
Graph cnn_training_graph() {
  SymbolicTensor in = Input({8, 8, 4});
  SymbolicTensor x = Conv2D(16, {1}, ConvOptions().strides({2}).padding("same"))(in);
  x = Conv2D(8, {3}, ConvOptions().padding("same").activation("relu"))(x);
  Model model({in}, Dense(3)(GlobalAveragePooling2D()(x)));
  model.compile(SGD({.learning_rate = 0.1}), losses::sparse_categorical_crossentropy);
  return model.training_graph({4, 8, 8, 4}, {4});
}

// The floor against the prediction where ops read halo exchanges' results:
// random answers (some split the rows) and the solver's.
TEST(MemoryFloor, NeverAboveThePredictedMemoryWithHalos) {
  const Cluster cluster = Cluster::named("a100-80g");
  std::mt19937 rng(60);
  const Graph g = cnn_training_graph();
  int checked = 0;
  for (const DeviceMesh& mesh : {DeviceMesh({2, 2}, {"data", "model"}), DeviceMesh({4}, {"seq"})}) {
    const StrategyProblem sp = build_strategy_problem(g, mesh, cluster, {});
    std::vector<std::vector<int>> answers;
    ShardingProblem p = sp.problem;
    answers.push_back(solve(p, {.time_limit_s = 600, .max_rounds = 2, .programs = false}).strategy);
    for (int k = 0; k < 12; ++k)
      if (std::vector<int> a = random_answer(g, sp, rng); !a.empty()) answers.push_back(a);
    for (const std::vector<int>& a : answers) {
      const PartitionRequest r = sp.request(a);
      EXPECT_LE(memory_floor(g, mesh, r, false), predicted_memory(g, mesh, r, false))
          << mesh.to_string();
      ++checked;
    }
  }
  EXPECT_GE(checked, 10);
}

// A plan that gathers what it should keep split: every op's inputs and
// output whole (replicated) while the weights stay split over all devices.
// The floor sees the gathered copies (the problem's count would not), and
// puts the plan over a budget that its leaves alone fit in.
TEST(MemoryFloor, CountsTheCopiesConversionsMake) {
  const Graph g = training_graph(false, 8);
  const DeviceMesh mesh({8}, {"data"});
  PartitionRequest whole;
  for (int id : g.parameters()) {
    const Shape& s = g.node(id).shape;
    Sharding split = Sharding::replicated(s.size());
    if (!s.empty() && s[0] % 8 == 0) split.dims[0] = 0;
    whole.leaves[id] = split;
  }
  double leaves = 0;
  for (int id : g.parameters())
    leaves += double(numel(whole.leaves[id].local_shape(g.node(id).shape, mesh, 0))) * 4;
  for (int i = 0; i < g.size(); ++i) {
    const Node& n = g.node(i);
    if (n.is_leaf()) continue;
    ShardDecision d;
    d.output = Sharding::replicated(n.shape.size());
    for (int in : n.inputs) d.inputs.push_back(Sharding::replicated(g.node(in).shape.size()));
    whole.decisions[i] = d;
  }
  const double floor = memory_floor(g, mesh, whole, false);
  EXPECT_LE(floor, predicted_memory(g, mesh, whole, false));
  EXPECT_GT(floor, 2 * leaves);  // the gathered weights and the whole activations
}

// On 64 devices of one axis, device 0's program gathers and scatters many
// values over the same extents: each distinct list of block sizes is held
// once, and every collective reads the right one.
TEST(MemoryFloor, CollectivesShareTheirBlockSizes) {
  const Graph g = training_graph(false, 128);
  const DeviceMesh mesh({64}, {"data"});
  PartitionRequest fsdp;  // every weight split over the data axis where it divides
  for (int id : g.parameters()) {
    const Shape& s = g.node(id).shape;
    Sharding split = Sharding::replicated(s.size());
    if (!s.empty()) split.dims[0] = 0;  // uneven where 64 does not divide
    fsdp.leaves[id] = split;
  }
  for (int id : g.inputs()) fsdp.leaves[id] = DataParallel(mesh).input_layout(g.node(id).shape);
  const Partition p = partition(g, mesh, fsdp, {}, {0});
  std::map<std::pair<int64_t, int>, const std::vector<int64_t>*> lists;  // (extent, axis)
  std::set<const std::vector<int64_t>*> distinct;
  int collectives = 0;
  const Graph& local = p.local[0];
  for (int i = 0; i < local.size(); ++i) {
    const Node& n = local.node(i);
    if (n.op != Op::AllGather && n.op != Op::ReduceScatter) continue;
    const SplitAttrs& a = n.attr<SplitAttrs>();
    const Shape& whole = n.op == Op::AllGather ? n.shape : local.node(n.inputs[0]).shape;
    EXPECT_EQ(a.sizes.values(), split_sizes(whole[size_t(a.dim)], 64));
    const auto [it, fresh] = lists.try_emplace({whole[size_t(a.dim)], a.axis}, &a.sizes.values());
    EXPECT_EQ(it->second, &a.sizes.values()) << "a second list for the same extent";
    distinct.insert(&a.sizes.values());
    ++collectives;
  }
  EXPECT_GT(collectives, 2 * int(distinct.size()));
}

}  // namespace memory_floor_test
}  // namespace autoshard
