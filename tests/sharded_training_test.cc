// Sharded training through the Keras-style API: a GPT-2 with awkward sizes
// (3 heads, vocabulary 67: divisible by none of the meshes) trained for
// several AdamW steps on many meshes, with and without ZeRO-1, under the
// Megatron layout and under AutoShard's, must give the one-device losses and
// weights.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/plan/cost_model.h"
#include "test_util.h"

namespace autoshard {
namespace {

constexpr int kSteps = 4;

struct MeshTrainResult {
  std::vector<double> losses;
  std::map<std::string, Tensor> weights;
};

// Adam's epsilon is 1e-3 here: see partitioner_test.cc for why weights are
// only comparable where Adam is well conditioned.
std::shared_ptr<Optimizer> optimizer() {
  return AdamW({.learning_rate = 1e-2, .epsilon = 1e-3, .weight_decay = 0.1, .clipnorm = 1.0});
}

MeshTrainResult train(std::shared_ptr<Distribution> dist, int64_t batch, bool recompute = false) {
  GPT2 model(GPT2Config::preset("test"), 6, /*seed=*/3);
  model.set_recompute(recompute);
  if (dist) model.set_distribution(dist);
  model.compile(optimizer(), losses::sparse_categorical_crossentropy);
  MeshTrainResult r;
  for (int s = 0; s < kSteps; ++s) {
    Tensor x = testing::random_ids({batch, 6}, 67, 100 + s),
           y = testing::random_ids({batch, 6}, 67, 200 + s);
    r.losses.push_back(model.train_on_batch(x, y));
  }
  for (const std::string& p : model.weight_paths()) r.weights[p] = model.gather_weight(p);
  return r;
}

void expect_equal(const MeshTrainResult& got, const MeshTrainResult& want,
                  const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i)
    EXPECT_NEAR(got.losses[i], want.losses[i], 1e-5 * want.losses[i]) << what << " step " << i + 1;
  for (const auto& [path, w] : want.weights)
    EXPECT_LT(max_relative_error(got.weights.at(path), w), 1e-4) << what << " " << path;
}

struct MeshCase {
  std::vector<int> shape;
  std::vector<std::string> names;
};

const std::vector<MeshCase> kMeshCases = {{{1}, {"model"}},
                                          {{2}, {"model"}},
                                          {{3}, {"model"}},
                                          {{4}, {"model"}},
                                          {{5}, {"model"}},
                                          {{2}, {"data"}},
                                          {{2, 2}, {"data", "model"}},
                                          {{3, 2}, {"data", "model"}}};

// Megatron's layout plain, with ZeRO-1, and with sequence parallelism (the
// sequence of 6 split unevenly over 4 and 5 devices).
TEST(ShardedTraining, MegatronLayoutOnEveryMeshMatchesOneDevice) {
  const MeshTrainResult want = train(nullptr, 6);
  for (const MeshCase& m : kMeshCases)
    for (const std::string variant : {"", "zero1", "sequence parallel"}) {
      DeviceMesh mesh(m.shape, m.names);
      std::shared_ptr<Distribution> dist;
      if (mesh.axis_index("model") >= 0)
        dist = std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout());
      else if (variant == "sequence parallel")
        continue;
      else
        dist = std::make_shared<DataParallel>(mesh);
      dist->zero1 = variant == "zero1";
      if (variant == "sequence parallel") dist->sequence_parallel_axis = "model";
      expect_equal(train(dist, 6), want, mesh.to_string() + " " + variant);
    }
}

// Sequence parallelism turns each all-reduce of a block's output into a
// reduce-scatter (the residual stream stays split along the sequence) and an
// all-gather before the next split block: no activation is all-reduced, and
// the reduce-scatters move what the all-reduces did. (The blocks that
// Megatron runs split are unchanged; `test` has 2 layers.)
TEST(ShardedTraining, SequenceParallelSplitsTheResidualStream) {
  auto collectives = [](bool sequence_parallel) {
    GPT2 model(GPT2Config::preset("test"), 8, 0);
    auto dist = std::make_shared<ModelParallel>(DeviceMesh({2}, {"model"}), gpt2_megatron_layout());
    if (sequence_parallel) dist->sequence_parallel_axis = "model";
    model.set_distribution(dist);
    model.compile(AdamW(), losses::sparse_categorical_crossentropy);
    std::map<std::string, std::pair<int, int64_t>> by_kind;  // kind -> calls, bytes of activations
    const int64_t activation = 4 * 8 * 24 * 4;               // [4, 8, 24] floats: the residual
    for (const CollectiveRecord& c : model.plan_training({4, 8}, {4, 8}).collectives) {
      if (c.bytes < activation / 2) continue;  // gradients of biases and norms, logits' statistics
      ++by_kind[c.kind].first;
      by_kind[c.kind].second += c.bytes;
    }
    return by_kind;
  };
  auto plain = collectives(false), split = collectives(true);
  ASSERT_GT(plain["all_reduce"].first, 0);
  EXPECT_EQ(split["all_reduce"].first, 0);
  EXPECT_EQ(split["reduce_scatter"].first, plain["all_reduce"].first);
  EXPECT_EQ(split["reduce_scatter"].second, plain["all_reduce"].second);
  // Every block's input is gathered (again in the backward pass, for the
  // weights' gradients), as is every gradient that enters a split block.
  EXPECT_GE(split["all_gather"].first, plain["all_reduce"].first);
}

TEST(ShardedTraining, AutoShardOnEveryMeshMatchesOneDevice) {
  const MeshTrainResult want = train(nullptr, 6);
  for (const MeshCase& m : kMeshCases) {
    DeviceMesh mesh(m.shape, m.names);
    expect_equal(
        train(std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2}), 6),
        want, "autoshard " + mesh.to_string());
  }
}

// Recomputing each block's forward pass in the backward pass changes no
// number, on one device (bitwise) or any mesh of the matrix.
TEST(ShardedTraining, RecomputeOnEveryMeshMatchesOneDevice) {
  const MeshTrainResult want = train(nullptr, 6);
  const MeshTrainResult same = train(nullptr, 6, /*recompute=*/true);
  for (size_t i = 0; i < want.losses.size(); ++i) EXPECT_EQ(same.losses[i], want.losses[i]);
  for (const MeshCase& m : kMeshCases) {
    DeviceMesh mesh(m.shape, m.names);
    std::shared_ptr<Distribution> dist;
    if (mesh.axis_index("model") >= 0)
      dist = std::make_shared<ModelParallel>(mesh, gpt2_megatron_layout());
    else
      dist = std::make_shared<DataParallel>(mesh);
    expect_equal(train(dist, 6, true), want, "recompute " + mesh.to_string());
  }
}

// ... and lowers the activation memory the executor plans.
TEST(ShardedTraining, RecomputeLowersPlannedActivations) {
  auto planned = [](bool recompute) {
    GPT2Config c = GPT2Config::preset("test");
    c.n_layer = 6;
    GPT2 model(c, 16, 0);
    model.set_recompute(recompute);
    model.set_distribution(std::make_shared<DataParallel>(1));
    model.compile(AdamW(), losses::sparse_categorical_crossentropy);
    const Partition p = model.plan_training({8, 16}, {8, 16});
    return plan_buffers(p.local[0], p.outputs[0]).total_bytes();
  };
  const size_t with = planned(true), without = planned(false);
  EXPECT_LT(double(with), 0.6 * double(without)) << with << " vs " << without;
}

TEST(ShardedTraining, UnevenBatchOverDataAxis) {
  const MeshTrainResult want = train(nullptr, 5);
  auto dist = std::make_shared<DataParallel>(DeviceMesh({3, 2}, {"data", "model"}));
  dist->zero1 = true;
  expect_equal(train(dist, 5), want, "batch 5 on data=3");
}

TEST(ShardedTraining, ScopeDistributesWithoutChangingUserCode) {
  const MeshTrainResult want = train(nullptr, 6);
  MeshTrainResult got;
  {
    DistributionScope scope(std::make_shared<DataParallel>(2));
    GPT2 model(GPT2Config::preset("test"), 6, 3);
    model.compile(optimizer(), losses::sparse_categorical_crossentropy);
    EXPECT_EQ(model.distribution_strategy()->mesh().size(), 2);
    for (int s = 0; s < kSteps; ++s)
      got.losses.push_back(model.train_on_batch(testing::random_ids({6, 6}, 67, 100 + s),
                                                testing::random_ids({6, 6}, 67, 200 + s)));
    for (const std::string& p : model.weight_paths()) got.weights[p] = model.gather_weight(p);
  }
  EXPECT_EQ(distribution(), nullptr);
  expect_equal(got, want, "scope");
}

// A plain MLP with a prime hidden size, split over 4 devices by a LayoutMap.
TEST(ShardedTraining, PrimeHiddenSizeMlpWithFit) {
  auto run = [](std::shared_ptr<Distribution> dist) {
    auto in = Input({5});
    Model model({in}, Dense(1, DenseOptions().name("out"))(
                          Dense(13, DenseOptions().name("hidden").activation("tanh"))(in)));
    if (dist) model.set_distribution(dist);
    model.compile(SGD({.learning_rate = 0.05, .momentum = 0.9}), losses::mean_squared_error);
    Tensor x = testing::random_tensor({12, 5}, 1), y = testing::random_tensor({12, 1}, 2);
    History h = model.fit(x, y, {.batch_size = 4, .epochs = 3, .verbose = false});
    return std::make_pair(h.loss, model.gather_weight("hidden.kernel"));
  };
  LayoutMap map;
  map["hidden\\.kernel"] = {std::nullopt, "model"};
  map["hidden\\.bias"] = {"model"};
  map["out\\.kernel"] = {"model", std::nullopt};
  auto [want_loss, want_w] = run(nullptr);
  auto [got_loss, got_w] = run(std::make_shared<ModelParallel>(DeviceMesh({4}, {"model"}), map));
  for (size_t i = 0; i < want_loss.size(); ++i)
    EXPECT_NEAR(got_loss[i], want_loss[i], 1e-5 * want_loss[i]);
  EXPECT_LT(max_relative_error(got_w, want_w), 1e-4);
}

// Keras 3 spells variable paths with "/" ("d1/kernel"), the engine with
// "." ("d1.kernel"): a key matches either spelling (the distribution
// guide's keys), exactly or as a regex.
TEST(Distribution, KerasSlashKeysMatchDottedPaths) {
  LayoutMap map;
  map["d1/kernel"] = {std::nullopt, "model"};
  map["^d2/b.*$"] = {"model"};
  ASSERT_TRUE(map.lookup("d1.kernel").has_value());
  EXPECT_EQ(map.lookup("d1.kernel")->axes[1], TensorLayout::Axes{"model"});
  EXPECT_TRUE(map.lookup("d2.bias").has_value());
  EXPECT_FALSE(map.lookup("d2.kernel").has_value());
  EXPECT_TRUE(map.unmatched({"d1.kernel", "d2.bias"}).empty());
  EXPECT_EQ(map.unmatched({"d1.kernel"}), std::vector<std::string>{"^d2/b.*$"});
}

TEST(Distribution, BadLayoutsAreClearErrors) {
  DeviceMesh mesh({2}, {"model"});
  LayoutMap unknown_axis;
  unknown_axis["kernel"] = {"tensor"};
  EXPECT_THROW(ModelParallel(mesh, unknown_axis), Error);
  LayoutMap two_keys;
  two_keys["query"] = {std::nullopt, "model", std::nullopt};
  two_keys["kernel"] = {std::nullopt, "model", std::nullopt};
  try {
    two_keys.lookup("h.0.attn.query.kernel");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'query' and 'kernel'"), std::string::npos) << e.what();
  }
  LayoutMap exact = two_keys;
  exact["h.0.attn.query.kernel"] = {"model", std::nullopt, std::nullopt};
  EXPECT_EQ(exact.lookup("h.0.attn.query.kernel")->axes[0],
            TensorLayout::Axes{"model"});  // an exact key wins
  LayoutMap too_long;
  too_long["bias"] = {"model", std::nullopt};
  GPT2 model(GPT2Config::preset("test"), 6, 0);
  model.set_distribution(std::make_shared<ModelParallel>(mesh, too_long));
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  EXPECT_THROW(
      model.train_on_batch(testing::random_ids({2, 6}, 67, 1), testing::random_ids({2, 6}, 67, 2)),
      Error);
  EXPECT_NO_THROW(DeviceMesh({32, 32}, {"data", "model"}));            // describable, for planning
  EXPECT_THROW(DeviceMesh({65536, 65536}, {"data", "model"}), Error);  // 2^32 would wrap an int
  EXPECT_THROW(DeviceMesh({1 << 13, 1 << 12}, {"data", "model"}), Error);
  EXPECT_THROW(DeviceMesh::parse("data=2,model"), Error);
  EXPECT_THROW(DeviceMesh({2, 2}, {"x", "x"}), Error);
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// The peaks a step's problem allows: with everything replicated (strategy
// 0 of every node), and with every node at its smallest usage.
std::pair<int64_t, int64_t> replicated_and_smallest_peaks(const DeviceMesh& mesh) {
  auto dist = std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.05});
  GPT2 model(GPT2Config::preset("test"), 6, 3);
  model.set_distribution(dist);
  model.compile(optimizer(), losses::sparse_categorical_crossentropy);
  model.plan_training({6, 6}, {6, 6});
  const ShardingProblem& p = dist->problem();
  std::vector<int> replicated(p.nodes.size(), 0), smallest(p.nodes.size(), 0);
  for (size_t i = 0; i < p.nodes.size(); ++i)
    smallest[i] = int(std::min_element(p.nodes[i].usage.begin(), p.nodes[i].usage.end()) -
                      p.nodes[i].usage.begin());
  return {p.peak_usage(replicated), p.peak_usage(smallest)};
}

// AutoShard under memory budgets between "everything replicated fits" and
// "only the smallest layouts fit": whatever the budget makes it choose
// (split weights, split optimizer state, split activations), the numbers are
// the one-device numbers, and the plan it ran is within its budget.
TEST(AutoShardPlan, BudgetsOnEveryMeshMatchOneDevice) {
  const MeshTrainResult want = train(nullptr, 6);
  std::mt19937 rng(5);
  int planned = 0;
  for (const MeshCase& m : kMeshCases) {
    DeviceMesh mesh(m.shape, m.names);
    if (mesh.size() == 1) continue;
    const auto [replicated, smallest] = replicated_and_smallest_peaks(mesh);
    ASSERT_LT(smallest, replicated) << mesh.to_string();
    const double f = std::uniform_real_distribution<double>(0.3, 1.0)(rng);
    const double budget = double(smallest) + f * double(replicated - smallest);
    auto dist = std::make_shared<AutoShard>(
        mesh, "data",
        AutoShardOptions{.memory_per_device = budget, .time_limit_s = 0.2, .seed = rng()});
    const std::string what = "autoshard " + mesh.to_string() + " budget " + std::to_string(budget);
    MeshTrainResult got;
    try {
      got = train(dist, 6);
    } catch (const Error& e) {
      // The executor's real peak (with the copies conversions make) can
      // exceed what the problem counts; then the error says so.
      EXPECT_NE(std::string(e.what()).find("no plan found fits in"), std::string::npos) << e.what();
      continue;
    }
    ++planned;
    expect_equal(got, want, what);
    EXPECT_EQ(*dist->problem().usage_limit, int64_t(budget));
    EXPECT_TRUE(dist->problem().feasible(dist->solution())) << what;
  }
  EXPECT_GE(planned, 4);
}

// AutoShard on `mesh` with a budget `fraction` of the way from the smallest
// peak to the replicated one.
std::shared_ptr<AutoShard> budgeted(const DeviceMesh& mesh, double fraction, double seconds) {
  const auto [replicated, smallest] = replicated_and_smallest_peaks(mesh);
  const double budget = double(smallest) + fraction * double(replicated - smallest);
  return std::make_shared<AutoShard>(
      mesh, "data", AutoShardOptions{.memory_per_device = budget, .time_limit_s = seconds});
}

// A budget below the replicated plan's peak: weights get split, and device
// 0's real weights and buffers shrink accordingly.
TEST(AutoShardPlan, ABudgetBelowTheReplicatedPeakSplitsWeights) {
  GPT2 model(GPT2Config::preset("test"), 6, 0);
  auto dist = budgeted(DeviceMesh({2}, {"model"}), 0.5, 0.2);
  model.set_distribution(dist);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  model.plan_training({6, 6}, {6, 6});
  int split = 0;
  for (const auto& [path, layout] : dist->plan()) split += layout.dim_of(0) >= 0;
  EXPECT_GT(split, 0);
}

// ZeRO is a choice, not a code path: on a data axis, a budget below the
// replicated plan's peak makes AutoShard split AdamW's moments over that
// axis (each device updating its block), and the numbers stay one
// device's.
TEST(AutoShardPlan, ABudgetOnADataAxisShardsTheOptimizerState) {
  auto dist = budgeted(DeviceMesh({2}, {"data"}), 0.5, 0.2);
  const MeshTrainResult got = train(dist, 6);
  expect_equal(got, train(nullptr, 6), "ZeRO by budget");
  int split = 0, moments = 0;
  for (const auto& [path, layout] : dist->plan()) {
    const Sharding w = dist->weight_layout(path, {});
    for (const char* slot : {"m", "v"}) {
      const Sharding s = dist->slot_layout(path, slot, w, {});
      ++moments;
      for (int d : s.dims) split += d == 0;
    }
  }
  EXPECT_GT(moments, 0);
  EXPECT_GT(split, 0) << "no optimizer state split over the data axis";
}

// And FSDP (ZeRO-3) is one too: a budget near the smallest peak on a data
// axis makes AutoShard split the weights themselves over it (gathered where
// they are read), with one device's numbers.
TEST(AutoShardPlan, ATightBudgetOnADataAxisShardsTheWeights) {
  auto dist = budgeted(DeviceMesh({4}, {"data"}), 0.1, 0.5);
  const MeshTrainResult got = train(dist, 8);
  expect_equal(got, train(nullptr, 8), "FSDP by budget");
  int64_t split = 0, whole = 0;
  for (const auto& [path, layout] : dist->plan()) {
    const int64_t n = numel(got.weights.at(path).shape());
    (layout.dim_of(0) >= 0 ? split : whole) += n;
  }
  EXPECT_GT(split, 4 * whole) << "most of the weights' elements split over the data axis";
}

// Devices beyond the cores take them in turns; a collective after a stretch
// of work waits for the last turn, which the problem's per-op sums cannot
// see. The whole program's prediction arbitrates: the plan kept is never
// predicted slower than data parallelism on its mesh, and where data
// parallelism wins (its collectives gather at the end of the step) it is
// what trains, to one device's numbers.
TEST(AutoShardPlan, OversubscribedDevicesKeepDataParallelismWhenItIsPredictedFaster) {
  const std::string file = ::testing::TempDir() + "/two_cores.json";
  Cluster two_cores = Cluster::preset("cpu");
  two_cores.shared_cores = 2;
  two_cores.flops_f32 = two_cores.flops_bf16 = 2e8;  // slow cores: long stretches of work
  two_cores.memory_bandwidth = 1e8;
  const DeviceMesh mesh({3}, {"data"});
  for (double slice : {1e-4, 1e-2}) {
    two_cores.oversubscribed_slice = slice;
    std::ofstream(file) << two_cores.to_json();
    auto dist = std::make_shared<AutoShard>(mesh, "data",
                                            AutoShardOptions{.cluster = file, .time_limit_s = 0.2});
    const MeshTrainResult got = train(dist, 6);
    GPT2 model(GPT2Config::preset("test"), 6, 0);
    model.set_distribution(std::make_shared<DataParallel>(mesh));
    model.compile(optimizer(), losses::sparse_categorical_crossentropy);
    const double data_parallel =
        predict(model.plan_training({6, 6}, {6, 6}), Cluster::named(file), {}).step_s;
    // (AutoShard's data parallelism is the step's, the same to 1e-3.)
    EXPECT_LE(dist->predicted_step_s(), data_parallel * (1 + 1e-3)) << "slice " << slice;
    const bool kept = dist->plan().empty();
    // A slice longer than the stretches: each pays the whole last turn.
    if (slice == 1e-2) {
      EXPECT_TRUE(kept);
    }
    if (kept) expect_equal(got, train(nullptr, 6), "data parallelism kept");
  }
}

TEST(AutoShardPlan, AnImpossibleBudgetIsAClearError) {
  GPT2 model(GPT2Config::preset("test"), 6, 0);
  model.set_distribution(std::make_shared<AutoShard>(
      DeviceMesh({2}, {"model"}), "data",
      AutoShardOptions{.memory_per_device = 1000, .time_limit_s = 0.2}));
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  try {
    model.plan_training({6, 6}, {6, 6});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no plan of this step fits in"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// --devices N: each split of N devices into data x model is screened, the
// best screened are planned in full, and the shape predicted fastest is
// taken; the one returned is planned already, on that shape.
TEST(AutoShardPlan, ChoosesTheMeshShapePredictedFastest) {
  GPT2 model(GPT2Config::preset("test"), 6, 0);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const Graph step = model.training_graph({8, 6}, {8, 6});
  std::vector<std::string> why;
  const auto planned =
      AutoShard::plan_for_devices(step, 4, "data", AutoShardOptions{.time_limit_s = 0.6}, &why);
  const DeviceMesh chosen = planned->mesh();
  ASSERT_EQ(why.size(), 3u);  // data=1,2,4 by model
  double best = 1e300, of_chosen = -1;
  int full = 0;
  for (const std::string& line : why) {
    // A full plan's line: "predicted X ms", or "data parallelism kept: X ms".
    size_t at = line.find("kept: ");
    if (at != std::string::npos) {
      at += 6, ++full;
    } else if ((at = line.find("predicted ")) != std::string::npos) {
      at += 10, ++full;
    } else {
      at = line.find("screened at ");
      ASSERT_NE(at, std::string::npos) << line;
      at += 12;
    }
    const double ms = std::stod(line.substr(at));
    best = std::min(best, ms);
    if (line.substr(0, line.find(':')) == chosen.to_string()) of_chosen = ms;
  }
  EXPECT_GE(full, 2);  // the two best screened, and data=4 if it is not among them
  EXPECT_LE(full, 3);
  EXPECT_NEAR(of_chosen, best, 0.0015);  // the lines round to microseconds
  EXPECT_EQ(chosen.size(), 4);
  EXPECT_FALSE(planned->solution().empty());
  EXPECT_EQ(planned->problem().name, "autoshard step on " + chosen.to_string());
  // The screen does not depend on the clock: the same lines again.
  std::vector<std::string> again;
  AutoShard::plan_for_devices(step, 4, "data", AutoShardOptions{.time_limit_s = 0.6}, &again);
  for (size_t k = 0; k < why.size(); ++k)
    if (why[k].find("screened at ") != std::string::npos) {  // up to a full plan's part
      EXPECT_EQ(why[k].substr(0, why[k].find(';')), again[k].substr(0, again[k].find(';')));
    }
}

// With 16 devices a third axis is tried, but only next to the best two-axis
// shape: every three-axis shape screened keeps that shape's data or model
// size and takes its other axis's devices; all five pairs are screened.
TEST(AutoShardPlan, TriesAThirdAxisNextToTheBestPair) {
  GPT2 model(GPT2Config::preset("test"), 6, 0);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const Graph step = model.training_graph({8, 6}, {8, 6});
  std::vector<std::string> why;
  AutoShard::plan_for_devices(step, 16, "data", AutoShardOptions{.time_limit_s = 0.4}, &why);
  // "data=2,model=8: screened at 1.234 ms per step[; predicted ...]".
  const auto sizes = [](const std::string& line) {
    std::vector<int> out;
    const std::string mesh = line.substr(0, line.find(':'));
    for (size_t at = mesh.find('='); at != std::string::npos; at = mesh.find('=', at + 1))
      out.push_back(std::stoi(mesh.substr(at + 1)));
    return out;
  };
  const auto cost = [](const std::string& line) {
    return std::stod(line.substr(line.find("screened at ") + 12));
  };
  std::vector<int> best_pair;
  double best = 1e300;
  int pairs = 0, triples = 0;
  for (const std::string& line : why) {
    if (sizes(line).size() != 2) continue;
    ++pairs;
    ASSERT_NE(line.find("screened at "), std::string::npos) << line;
    if (cost(line) < best) best = cost(line), best_pair = sizes(line);
  }
  EXPECT_EQ(pairs, 5);
  for (const std::string& line : why) {
    const std::vector<int> t = sizes(line);
    if (t.size() != 3) continue;
    ++triples;
    const bool from_data = t[1] == best_pair[1] && t[0] * t[2] == best_pair[0];
    const bool from_model = t[0] == best_pair[0] && t[1] * t[2] == best_pair[1];
    EXPECT_TRUE(from_data || from_model)
        << line << " (best pair " << best_pair[0] << "x" << best_pair[1] << ")";
  }
  EXPECT_GE(triples, 1);
  EXPECT_LT(triples, 3);  // of the 3 three-axis shapes of 16 devices, the best pair's
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// Wide products on a large batch with small weights: data parallelism over
// every device is the plan. On data=2,model=2 that needs the batch split
// over both axes at once (the tuple (data,model)): AutoShard keeps it by the
// whole program's prediction (its gradient buckets overlap the backward
// pass, which the solver's sum does not see), predicts what it predicts on
// data=4 (within 2%), and trains to one device's numbers.
std::unique_ptr<Model> wide_mlp(std::shared_ptr<Distribution> dist) {
  SymbolicTensor in = Input({256});
  SymbolicTensor h = in;
  for (const char* name : {"d0", "d1"})
    h = Dense(256, DenseOptions().activation("relu").name(name))(h);
  auto model = std::make_unique<Model>(std::vector<SymbolicTensor>{in},
                                       Dense(10, DenseOptions().name("out"))(h));
  model->set_seed(3);
  if (dist) model->set_distribution(std::move(dist));
  model->compile(SGD({.learning_rate = 0.05}),
                 losses::SparseCategoricalCrossentropy({.from_logits = true}));
  return model;
}

TEST(AutoShardPlan, SplitsTheBatchOverEveryDeviceOfATwoAxisMesh) {
  const std::string file = ::testing::TempDir() + "/no_overhead.json";
  Cluster a100 = Cluster::preset("a100-80g");
  a100.op_overhead = 0;  // the products' time, not their count
  std::ofstream(file) << a100.to_json();
  const int64_t B = 2048;
  const AutoShardOptions options{.cluster = file, .time_limit_s = 1, .deterministic = true};
  auto square = std::make_shared<AutoShard>(DeviceMesh({2, 2}, {"data", "model"}), "data", options);
  auto line = std::make_shared<AutoShard>(DeviceMesh({4}, {"data"}), "data", options);
  std::unique_ptr<Model> sharded = wide_mlp(square);
  const Partition p = sharded->plan_training({B, 256}, {B}, DType::I32);
  wide_mlp(line)->plan_training({B, 256}, {B}, DType::I32);
  const int both = tuple_axis({0, 1});
  EXPECT_EQ(square->batch_axis(), both);
  ASSERT_FALSE(square->reasons().empty());
  EXPECT_NE(square->reasons().front().find("kept: "), std::string::npos);
  int over_both = 0;
  for (const ShardDecision& d : p.decision)
    over_both += !d.output.dims.empty() && d.output.dims[0] == both;
  EXPECT_GT(over_both, 10) << "ops with their batch over (data,model)";
  EXPECT_LT(square->predicted_step_s(), line->predicted_step_s() * 1.02);
  std::unique_ptr<Model> one = wide_mlp(nullptr);
  for (int step = 0; step < 2; ++step) {
    const Tensor x = testing::random_tensor({B, 256}, 40 + step);
    const Tensor y = testing::random_ids({B}, 10, 50 + step);
    const double want = one->train_on_batch(x, y);
    EXPECT_NEAR(sharded->train_on_batch(x, y), want, 1e-5 * std::fabs(want)) << "step " << step;
  }
  for (const std::string& path : one->weight_paths())
    EXPECT_LT(max_relative_error(sharded->gather_weight(path), one->gather_weight(path)), 1e-4)
        << path;
}

}  // namespace
}  // namespace autoshard
