// The cost model: collectives against their closed forms on the link each
// mesh axis crosses, predicted memory against the executor's own buffer
// plan, communication against exactly the collectives the partitioner
// inserted, and clear errors for bad cluster descriptions.
#include "autoshard/plan/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/strategy_problem.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/overlap.h"
#include "autoshard/solver/solver.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

// Each gradient all-reduced where it stands, as the partitioner's records
// list them (runtime/overlap.h's buckets merge and hide them; Overlap tests
// price those), for the test's lifetime.
struct NoGradientBuckets {
  OverlapOptions saved = overlap_options();
  NoGradientBuckets() { set_overlap_options({false, saved.bucket_bytes}); }
  ~NoGradientBuckets() { set_overlap_options(saved); }
};

// One level of 4 devices at 1 GB/s and 10 us, then 0.5 GB/s and 100 us.
Cluster two_level_cluster() {
  Cluster c = Cluster::preset("a100-80g");
  c.links = {{"fast", 4, 1e9, 1e-5, 1.0}, {"slow", 0, 0.5e9, 1e-4, 1.0}};
  return c;
}

TEST(CostModel, AxesTalkOverTheLinkTheirGroupsFitIn) {
  const Cluster c = Cluster::preset("a100-80g");
  const DeviceMesh mesh({16, 8}, {"data", "model"});
  EXPECT_EQ(c.link(mesh, 1).name, "nvlink");
  EXPECT_EQ(c.link(mesh, 0).name, "infiniband");
  // An inner axis of 16 no longer fits in a node of 8.
  EXPECT_EQ(c.link(DeviceMesh({8, 16}, {"data", "model"}), 1).name, "infiniband");
}

// The link an axis should talk over, by listing its groups: every device's
// group is the devices that differ from it only along `axis`; a group
// crosses a node when its devices are not all in the same node.
std::string link_by_enumeration(const Cluster& c, const DeviceMesh& mesh, int axis) {
  for (const LinkLevel& l : c.links) {
    if (l.devices_per_group == 0) return l.name;
    bool all_inside = true;
    for (int d = 0; d < mesh.size() && all_inside; ++d)
      for (int member : mesh.group(d, axis))
        if (member / l.devices_per_group != d / l.devices_per_group) all_inside = false;
    if (all_inside) return l.name;
  }
  return c.links.back().name;
}

// Meshes of 3, 5, 6 and 12 devices (and a few larger) over nodes of 4 and
// 8: every axis, and every run of axes collectives span at once, against
// the enumeration of its groups. model = 3 on a node
// of 8 is NVLink (it was priced over InfiniBand: 8 is not a multiple of 3).
TEST(CostModel, EveryAxisTalksOverTheLinkItsGroupsCross) {
  const std::vector<std::vector<int>> shapes = {
      {3},       {5},       {6},    {12},   {1, 3}, {2, 3},    {3, 2},  {3, 3},
      {2, 5},    {5, 2},    {3, 4}, {4, 3}, {2, 6}, {6, 2},    {12, 1}, {2, 2, 3},
      {3, 2, 2}, {2, 3, 2}, {3, 5}, {4, 6}, {6, 4}, {2, 3, 4}, {5, 3},  {16, 3}};
  for (int node : {4, 8}) {
    Cluster c = Cluster::preset("a100-80g");
    c.links = {{"node", node, 300e9, 1e-6, 1.0}, {"network", 0, 25e9, 5e-6, 1.0}};
    for (const auto& shape : shapes) {
      std::vector<std::string> names;
      for (size_t a = 0; a < shape.size(); ++a) names.push_back("a" + std::to_string(a));
      const DeviceMesh mesh(shape, names);
      std::vector<int> axes = mesh.collective_tuples();  // runs of axes too
      for (int axis = 0; axis < mesh.rank(); ++axis) axes.push_back(axis);
      for (int axis : axes)
        EXPECT_EQ(c.link(mesh, axis).name, link_by_enumeration(c, mesh, axis))
            << mesh.to_string() << " axis " << mesh.axis_name(axis) << " on nodes of " << node;
    }
  }
  const Cluster a100 = Cluster::preset("a100-80g");
  EXPECT_EQ(a100.link(DeviceMesh({3}, {"model"}), 0).name, "nvlink");
  EXPECT_EQ(a100.link(DeviceMesh({2, 3}, {"data", "model"}), 1).name, "nvlink");
  EXPECT_EQ(a100.link(DeviceMesh({2, 3}, {"data", "model"}), 0).name, "nvlink");
  EXPECT_EQ(a100.link(DeviceMesh({3, 3}, {"data", "model"}), 1).name, "infiniband");
  // A 64 MiB all-reduce over model = 3 on one node: NVLink's time, not the network's.
  const double nvlink =
      collective_seconds(a100, DeviceMesh({3}, {"model"}), 0, true, 64 << 20, 64 << 20);
  EXPECT_LT(nvlink, 1e-3);
}

// Gradient buckets' non-blocking all-reduces may reach another rate than
// the blocking ones over MPI (calibrate measures both): a level's
// bucket_bandwidth prices them, read back from its cluster file, and the
// blocking collectives keep the level's own bandwidth.
TEST(CostModel, BucketsArePricedAtTheirOwnRateWhereTheLinkHasOne) {
  Cluster c = two_level_cluster();
  c.links[1].bucket_bandwidth = 0.25e9;
  c.links[1].bucket_latency = 2e-4;
  const Cluster back = Cluster::from_json(c.to_json(), "round trip");
  EXPECT_EQ(back.links[1].bucket_bandwidth, 0.25e9);
  EXPECT_EQ(back.links[1].bucket_latency, 2e-4);
  EXPECT_EQ(back.links[0].bucket_bandwidth, 0);
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const double bytes = 8e6;
  EXPECT_NEAR(bucket_seconds(back, mesh, 0, bytes), 2 * 2e-4 + bytes / 0.25e9, 1e-12);
  EXPECT_NEAR(collective_seconds(back, mesh, 0, true, bytes, bytes), 2 * 1e-4 + bytes / 0.5e9,
              1e-12);
  // A level without its own bucket rate: buckets as any all-reduce.
  EXPECT_EQ(bucket_seconds(back, mesh, 1, bytes),
            collective_seconds(back, mesh, 1, true, bytes, bytes));
}

TEST(CostModel, CollectivesFollowTheRingClosedForms) {
  const Cluster c = two_level_cluster();
  const DeviceMesh mesh({2, 4}, {"data", "model"});
  const double bytes = 8e6;
  // Inner axis (n = 4) over "fast": all-reduce 2(n-1)a + 2(n-1)/n B/w.
  EXPECT_NEAR(collective_seconds(c, mesh, 1, true, bytes, bytes), 6 * 1e-5 + 1.5 * bytes / 1e9,
              1e-12);
  // Outer axis (n = 2) over "slow": all-gather (n-1)(a + b/w), b the largest block.
  EXPECT_NEAR(collective_seconds(c, mesh, 0, false, bytes, 5e6), 1e-4 + 5e6 / 0.5e9, 1e-12);
  EXPECT_EQ(collective_seconds(c, DeviceMesh({1, 8}, {"data", "model"}), 0, true, bytes, bytes), 0);
}

TEST(CostModel, UnevenShardsArePacedByTheLargestBlock) {
  const Cluster c = two_level_cluster();
  const DeviceMesh mesh({4}, {"model"});
  // 10 rows over 4 devices: blocks of 3, 3, 2, 2 rows of 100 floats.
  const Sharding split{{0, -1}, {}};
  const double t = conversion_seconds(c, mesh, split, Sharding::replicated(2), {10, 100}, false);
  EXPECT_NEAR(t, 3 * (1e-5 + 300 * 4 / 1e9), 1e-12);
}

// Devices beyond the cores take them in turns: 4 devices on 2 cores fill
// both turns (no loss), 3 leave a core idle in the second turn (the
// calibrated loss), 5 leave one of six (two thirds of that loss).
TEST(CostModel, OversubscribedDevicesLoseTheIdleCoresOfTheirLastTurn) {
  Cluster c = Cluster::preset("a100-80g");
  c.shared_cores = 2;
  c.oversubscribed_efficiency = 0.9;
  const double whole = 600;
  EXPECT_DOUBLE_EQ(c.share(whole, 2), 300);
  EXPECT_DOUBLE_EQ(c.share(whole, 3), 200 * 0.9);
  EXPECT_DOUBLE_EQ(c.share(whole, 4), 150);
  EXPECT_NEAR(c.share(whole, 5), 120 * (1 - 0.1 * (1.0 / 6) / (1.0 / 4)), 1e-9);
  // One core: every count is whole turns, so the calibrated figure is time slicing alone.
  c.shared_cores = 1;
  EXPECT_DOUBLE_EQ(c.share(whole, 3), 200 * 0.9);
}

// Devices beyond the cores: a stretch of work between collectives much
// shorter than the slice pays the whole last turn (3 devices on 2 cores: 2
// turns of it), a much longer one only its share (1.5x); whole turns (4 on
// 2) never leave a core idle.
TEST(CostModel, StretchesBetweenCollectivesPayTheLastTurnByTheirLength) {
  Cluster c = Cluster::preset("a100-80g");
  c.shared_cores = 2;
  c.oversubscribed_slice = 0.01;
  EXPECT_DOUBLE_EQ(c.stretch_seconds(0.5, 2), 0.5);  // a core each
  EXPECT_NEAR(c.stretch_seconds(1e-6, 3), 2e-6, 1e-9);
  EXPECT_NEAR(c.stretch_seconds(0.01, 3), 0.015 + 0.5 * 0.01 * 0.5, 1e-12);
  EXPECT_NEAR(c.stretch_seconds(100, 3) / 100, 1.5, 1e-4);
  EXPECT_DOUBLE_EQ(c.stretch_seconds(0.003, 4), 0.006);
  EXPECT_FALSE(c.oversubscribed(2));
  EXPECT_TRUE(c.oversubscribed(3));
}

// Under mpirun every axis talks over the calibrated MPI link, whatever the
// in-process links say, and a host's cores are shared by its own ranks
// only: 4 ranks on 2 hosts of 2 cores each have a core each.
TEST(CostModel, MpiRanksTalkOverTheCalibratedMpiLinkAndShareTheirHostsCores) {
  Cluster c = two_level_cluster();
  c.shared_cores = 2;
  c.mpi_link = LinkLevel{"mpi", 0, 2e8, 3e-5, 1.0};
  const DeviceMesh mesh({2, 3}, {"data", "model"});
  const Cluster ranks = c.as_mpi_ranks(2);
  for (int axis = 0; axis < 2; ++axis) {
    EXPECT_EQ(c.link(mesh, axis).name, "slow");  // groups of 3 and 2 x 3 cross the 4s
    EXPECT_EQ(ranks.link(mesh, axis).name, "mpi");
  }
  EXPECT_DOUBLE_EQ(collective_seconds(ranks, mesh, 1, true, 6e6, 6e6),
                   4 * 3e-5 + 4.0 / 3 * 6e6 / 2e8);
  EXPECT_TRUE(c.oversubscribed(4));
  EXPECT_FALSE(ranks.oversubscribed(4));
  EXPECT_DOUBLE_EQ(ranks.share(600, 4), 300);
  EXPECT_EQ(ranks.devices_per_host(5), 3);
  // Uncalibrated (no mpi_link): the links stay, only the hosts change.
  c.mpi_link.reset();
  EXPECT_EQ(c.as_mpi_ranks(1).link(mesh, 0).name, "slow");
  // A cluster file says how many hosts its devices spread over.
  EXPECT_EQ(Cluster::from_json(ranks.to_json(), "ranks.json").hosts, 2);
  EXPECT_EQ(Cluster::from_json(c.to_json(), "c.json").hosts, 1);
}

// Moving a split from one dimension to another is one all-to-all: each
// device sends n - 1 pieces of its block, not the whole value an all-gather
// would assemble before slicing.
TEST(CostModel, MovingASplitIsPricedAsOneAllToAll) {
  const Cluster c = two_level_cluster();
  const DeviceMesh mesh({4}, {"model"});
  const Shape shape{4096, 1024};
  const Sharding rows{{0, -1}, {}}, cols{{-1, 0}, {}}, whole{{-1, -1}, {}};
  const double block = 1024 * 1024 * 4;  // bytes of each device's rows
  EXPECT_DOUBLE_EQ(conversion_seconds(c, mesh, rows, cols, shape, false),
                   collective_seconds(c, mesh, 0, false, block, block / 4));
  EXPECT_LT(conversion_seconds(c, mesh, rows, cols, shape, false),
            0.5 * conversion_seconds(c, mesh, rows, whole, shape, false));
}

// A GPT-2 small enough to lower quickly, with sizes no mesh divides.
Partition gpt2_partition(std::shared_ptr<Distribution> dist, bool recompute = false) {
  GPT2Config cfg = GPT2Config::preset("test");
  GPT2 model(cfg, 6, 0);
  model.set_recompute(recompute);
  model.set_distribution(std::move(dist));
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  return model.plan_training({5, 6}, {5, 6});
}

TEST(CostModel, CommunicationIsExactlyThePartitionersCollectives) {
  const NoGradientBuckets unbucketed;
  const Cluster c = two_level_cluster();
  const DeviceMesh mesh({2, 3}, {"data", "model"});
  const Partition p = gpt2_partition(std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout()));
  ASSERT_FALSE(p.collectives.empty());
  const StepPrediction got = predict(p, c, {});
  double sum = 0;
  for (const auto& [key, seconds] : got.collective_s) sum += seconds;
  EXPECT_NEAR(sum, got.communication_s, 1e-15);
  // Every collective the partitioner recorded, priced on its own.
  double want = 0;
  for (const CollectiveRecord& r : p.collectives) {
    const int axis = r.axis == "data" ? 0 : r.axis == "model" ? 1 : tuple_axis({0, 1});
    const double n = mesh.axis_size(axis), bytes = double(r.bytes);
    if (r.kind == "all_reduce")
      want += collective_seconds(c, mesh, axis, true, bytes, bytes);
    else if (r.kind == "all_gather")
      want += collective_seconds(c, mesh, axis, false, bytes * n, bytes);
    else
      want += collective_seconds(c, mesh, axis, false, bytes, bytes / n);
  }
  // Recorded bytes are device 0's blocks, the largest; the sizes match to
  // within a block's rounding.
  EXPECT_NEAR(got.communication_s, want, 0.05 * want);
  EXPECT_GT(got.collective_s.count({"all_reduce", "data"}), 0u);
}

// predict() times each stretch between collectives as a whole: with a slice
// far shorter than any stretch, 3 devices on 2 cores take 1.5 times what
// each takes on a core of its own; far longer, 2 times (every stretch waits
// for the last turn). The same program, so exactly 4/3 apart.
TEST(CostModel, OversubscribedProgramsAreTimedByStretchesBetweenCollectives) {
  const DeviceMesh mesh({1, 3}, {"data", "model"});
  const Partition p = gpt2_partition(std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout()));
  Cluster c = Cluster::preset("a100-80g");
  c.shared_cores = 2;
  c.oversubscribed_slice = 1e-15;
  const StepPrediction sliced_finely = predict(p, c, {});
  c.oversubscribed_slice = 1e6;
  const StepPrediction sliced_coarsely = predict(p, c, {});
  EXPECT_NEAR(sliced_coarsely.compute_s / sliced_finely.compute_s, 4.0 / 3.0, 1e-6);
  EXPECT_DOUBLE_EQ(sliced_coarsely.communication_s, sliced_finely.communication_s);
}

// What the planner's problem charges for its answer is what the cost model
// predicts for the program the partitioner makes of it: the same op costs,
// the same collectives (a value read by several ops of one pass converted
// once, through the staging layout the answer chose), the same inserted
// slices and write-backs. (Without staging, a gradient's all-reduce is
// charged once for its update and again for the gradient norm.)
// (The planner's problem does not yet price gradient buckets: compared
// with them off.)
TEST(CostModel, ThePlannersProblemPricesWhatThePartitionerRuns) {
  const NoGradientBuckets unbucketed;
  const Cluster c = Cluster::named("a100-80g");
  GPT2Config cfg = GPT2Config::preset("test");
  cfg.n_embd = 510;  // wide enough for bandwidth, not latency, to set the collectives' time
  cfg.n_positions = 64;
  GPT2 model(cfg, 64, 0);
  model.compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  const Graph g = model.training_graph({8, 64}, {8, 64});
  std::vector<int> outputs;  // the loss and what else nothing reads (the step's results)
  std::vector<bool> read(g.size(), false);
  for (int i = 0; i < g.size(); ++i)
    for (int in : g.node(i).inputs) read[in] = true;
  for (int i = 0; i < g.size(); ++i)
    if (!read[i] && !g.node(i).is_leaf() && !op_def(g.node(i).op).side_effect) outputs.push_back(i);
  ASSERT_FALSE(outputs.empty());
  for (const DeviceMesh& mesh :
       {DeviceMesh({2, 2}, {"data", "model"}), DeviceMesh({1, 3}, {"data", "model"}),
        DeviceMesh({4}, {"data"})}) {
    StrategyOptions so;
    for (int id : g.inputs()) so.fixed[id] = DataParallel(mesh).input_layout(g.node(id).shape);
    const StrategyProblem sp = build_strategy_problem(g, mesh, c, so);
    // Rounds, not seconds: the same answer under the sanitizers.
    const SolveResult r =
        solve(sp.problem, {.time_limit_s = 600, .max_rounds = 4, .programs = false});
    ASSERT_TRUE(r.feasible) << r.why;
    const Partition p = partition(g, mesh, sp.request(r.strategy), outputs, {0});
    const double priced = double(sp.problem.cost(r.strategy)) * 1e-9;
    const double predicted = predict(p, c, {}).step_s;
    // All but the results brought back whole for the caller (all-reduces of
    // single numbers over the data axis, outside the problem: 0.4% here).
    // Without staging, 1.5% and 2.2% over on the first two meshes.
    EXPECT_NEAR(priced, predicted, 0.01 * predicted) << mesh.to_string();
  }
}

TEST(CostModel, MemoryIsTheExecutorsBufferPlanPlusState) {
  const Cluster c = two_level_cluster();
  const DeviceMesh mesh({3}, {"model"});
  const Partition p = gpt2_partition(std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout()));
  const StepPrediction got = predict(p, c, {});
  const Graph& g = p.local[0];
  // The executor's buffers, the gradient buckets' included.
  Executor exec(g, p.outputs[0]);
  exec.set_overlap(overlap_options().enabled ? overlap_options().bucket_bytes : 0);
  EXPECT_EQ(got.memory.activations, double(exec.planned_bytes()));
  double weights = 0, slots = 0;
  for (int id : g.parameters())
    (g.node(id).leaf().is_slot() ? slots : weights) += double(numel(g.node(id).shape)) * 4;
  EXPECT_EQ(got.memory.weights, weights);
  EXPECT_EQ(got.memory.optimizer_state, slots);
  EXPECT_EQ(slots, 2 * weights);  // AdamW's two moments
  // Mixed precision: a bf16 copy beside each fp32 master weight, half the buffers.
  const StepPrediction mixed = predict(p, c, {.bf16 = true});
  EXPECT_EQ(mixed.memory.weights, 1.5 * weights);
  EXPECT_EQ(mixed.memory.activations, 0.5 * got.memory.activations);
  // Devices that outnumber the cores (a calibrated CPU cluster): their time
  // is taken in stretches without a lane for the buckets, but the executor
  // still holds the buckets' buffers. (They were left out: GPT-2 on
  // data=2,model=2 predicted 4,217 MiB under a calibrated cluster file
  // against 5,140 under the preset, where the run held 4,989.)
  Cluster oversubscribed = c;
  oversubscribed.shared_cores = 2;
  oversubscribed.oversubscribed_slice = 0.01;
  ASSERT_TRUE(oversubscribed.oversubscribed(mesh.size()));
  ASSERT_FALSE(plan_gradient_buckets(g, plan_buffers(g, p.outputs[0]).schedule,
                                     overlap_options().bucket_bytes)
                   .empty());  // the replicated LayerNorms' gradients
  EXPECT_EQ(predict(p, oversubscribed, {}).memory.activations, double(exec.planned_bytes()));
}

TEST(CostModel, RecomputeTradesTimeForMemory) {
  const Cluster c = Cluster::preset("a100-80g");
  const auto dist = std::make_shared<DataParallel>(2);
  const StepPrediction plain = predict(gpt2_partition(dist), c, {});
  const StepPrediction again = predict(gpt2_partition(dist, true), c, {});
  EXPECT_LT(again.memory.activations, plain.memory.activations);
  EXPECT_GT(again.compute_s, plain.compute_s);
}

TEST(CostModel, MatrixProductsFollowTheEfficiencyCurve) {
  Cluster c = Cluster::preset("a100-80g");
  c.gemm_efficiency = {{1e6, 0.1}, {1e8, 0.5}};
  EXPECT_DOUBLE_EQ(c.gemm_fraction(1e5), 0.1);
  EXPECT_DOUBLE_EQ(c.gemm_fraction(1e7), 0.3);  // halfway in log(flops)
  EXPECT_DOUBLE_EQ(c.gemm_fraction(1e9), 0.5);
}

TEST(CostModel, BadClustersAreClearErrors) {
  auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message([] { Cluster::named("tpu-v9"); }).find("unknown cluster 'tpu-v9'"),
            std::string::npos);
  EXPECT_NE(message([] { Cluster::named("/nonexistent/c.json"); }).find("cannot be read"),
            std::string::npos);
  EXPECT_NE(message([] { Cluster::from_json("{", "x.json"); }).find("not valid JSON"),
            std::string::npos);
  const std::string good = Cluster::preset("a100-80g").to_json();
  EXPECT_EQ(Cluster::from_json(good, "a").to_json(), good);  // round trip
  std::string negative = good;
  negative.replace(negative.find("\"memory_bandwidth\": "), 20, "\"memory_bandwidth\": -");
  EXPECT_NE(message([&] { Cluster::from_json(negative, "n.json"); }).find("memory_bandwidth"),
            std::string::npos);
  Cluster small = Cluster::preset("a100-80g");
  small.links.back().devices_per_group = 16;
  EXPECT_NE(message([&] {
              small.check_mesh(DeviceMesh({4, 8}, {"data", "model"}));
            }).find("has 32 devices but cluster"),
            std::string::npos);
}

}  // namespace
}  // namespace autoshard
