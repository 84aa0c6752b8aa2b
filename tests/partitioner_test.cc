// The partitioner against one device: a GPT-2 training step (forward,
// backward, clipped AdamW) with random layouts for every weight on random
// meshes must give the single-device loss and updated weights; readers that
// share a staging layout share its conversion.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/models/gpt2.h"
#include "autoshard/runtime/sharded_executor.h"
#include "test_util.h"

namespace autoshard {
namespace {

struct TrainStep {
  Graph graph;
  int loss = -1;
  std::map<std::string, Tensor> state;  // weights and slots, whole
  Tensor x, y;
};

TrainStep make_step(int64_t batch, int64_t seq, uint64_t seed) {
  TrainStep s;
  GPT2Config cfg = GPT2Config::preset("test");
  GPT2 model(cfg, seq, seed);
  Value logits = model.trace_forward(s.graph, batch, /*training=*/false);
  Value y = s.graph.input("y", {batch, seq}, DType::I32);
  Value loss = losses::sparse_categorical_crossentropy(logits, y);
  std::vector<Value> params;
  for (int id : s.graph.parameters()) params.push_back(s.graph.value(id));
  // Adam turns gradient elements below its epsilon into steps that depend on
  // their rounding, and any reordering of float sums (a sharded contraction,
  // a different BLAS blocking) moves them: with epsilon 1e-8 single elements
  // drift by up to the learning rate. Epsilon 1e-3 keeps the comparison on
  // the well-conditioned part; the arithmetic under test is the same.
  AdamW({.learning_rate = 1e-2, .epsilon = 1e-3, .weight_decay = 0.1, .clipnorm = 0.5})
      ->append_update(s.graph, params, gradients(loss, params));
  s.loss = loss.id;
  for (int id : s.graph.parameters()) {
    const Node& n = s.graph.node(id);
    s.state[n.leaf().key()] = n.leaf().is_slot() ? testing::random_tensor(n.shape, id, 0.0f)
                                                 : model.gather_weight(n.leaf().key()).clone();
  }
  s.x = testing::random_ids({batch, seq}, static_cast<int32_t>(cfg.vocab_size), seed + 1);
  s.y = testing::random_ids({batch, seq}, static_cast<int32_t>(cfg.vocab_size), seed + 2);
  return s;
}

// Runs `steps` steps on one device; returns the losses, updating s.state.
std::vector<double> run_single(TrainStep& s, int steps) {
  Executor exec(s.graph, {s.loss});
  for (int id : s.graph.parameters()) exec.bind(id, s.state.at(s.graph.node(id).leaf().key()));
  exec.bind(s.graph.find_input("x"), s.x);
  exec.bind(s.graph.find_input("y"), s.y);
  std::vector<double> losses;
  for (int t = 1; t <= steps; ++t) {
    exec.run({t, 1e-2});
    losses.push_back(exec.value(s.loss).item());
  }
  return losses;
}

std::vector<double> run_sharded(TrainStep& s, const DeviceMesh& mesh,
                                const std::map<int, Sharding>& layouts, int steps) {
  ShardedExecutor exec(s.graph, mesh, layouts, {s.loss});
  std::vector<std::pair<int, std::vector<Tensor>>> blocks;
  auto bind_all = [&](int id, const Tensor& whole) {
    std::vector<Tensor> per;
    for (int d = 0; d < mesh.size(); ++d) {
      per.push_back(block_of(whole, exec.layout(id), mesh, d));
      exec.bind(d, id, per.back());
    }
    blocks.emplace_back(id, per);
  };
  for (int id : s.graph.parameters()) bind_all(id, s.state.at(s.graph.node(id).leaf().key()));
  bind_all(s.graph.find_input("x"), s.x);
  bind_all(s.graph.find_input("y"), s.y);
  std::vector<double> losses;
  for (int t = 1; t <= steps; ++t) {
    exec.run({t, 1e-2});
    losses.push_back(exec.output(0).item());
  }
  // Reassemble the updated state.
  for (auto& [id, per] : blocks) {
    const Node& n = s.graph.node(id);
    if (n.op != Op::Parameter) continue;
    Tensor& whole = s.state.at(n.leaf().key());
    for (int d = 0; d < mesh.size(); ++d) write_block(whole, per[d], exec.layout(id), mesh, d);
  }
  return losses;
}

Sharding random_layout(const Shape& shape, const DeviceMesh& mesh, std::mt19937& rng) {
  Sharding s = Sharding::replicated(shape.size());
  std::vector<int> axes;
  for (int a = 0; a < mesh.rank(); ++a) axes.push_back(a);
  std::shuffle(axes.begin(), axes.end(), rng);
  for (int a : axes) {
    int d = static_cast<int>(rng() % (shape.size() + 1));  // shape.size(): leave this axis unused
    if (d < static_cast<int>(shape.size()) && s.dims[d] < 0) s.dims[d] = a;
  }
  return s;
}

void expect_same(const TrainStep& ref, const TrainStep& got, const std::vector<double>& ref_losses,
                 const std::vector<double>& losses, const std::string& what) {
  for (size_t i = 0; i < losses.size(); ++i)
    EXPECT_NEAR(losses[i], ref_losses[i], 1e-5 * std::fabs(ref_losses[i]))
        << what << " step " << i + 1;
  for (const auto& [path, t] : ref.state) {
    EXPECT_LT(max_relative_error(got.state.at(path), t), 1e-4) << what << " " << path;
  }
}

TEST(Partitioner, RandomLayoutsOnRandomMeshesMatchOneDevice) {
  std::mt19937 rng(2024);
  const std::vector<DeviceMesh> meshes = {DeviceMesh({2}, {"model"}),
                                          DeviceMesh({3}, {"model"}),
                                          DeviceMesh({5}, {"data"}),
                                          DeviceMesh({2, 2}, {"data", "model"}),
                                          DeviceMesh({3, 2}, {"data", "model"}),
                                          DeviceMesh({2, 3}, {"a", "b"})};
  TrainStep ref = make_step(3, 5, 7);
  std::vector<double> ref_losses = run_single(ref, 3);
  for (int trial = 0; trial < 24; ++trial) {
    const DeviceMesh& mesh = meshes[trial % meshes.size()];
    TrainStep s = make_step(3, 5, 7);
    std::map<int, Sharding> layouts;
    for (int id = 0; id < s.graph.size(); ++id) {
      const Node& n = s.graph.node(id);
      if (n.op == Op::Parameter || n.op == Op::Input)
        layouts[id] = random_layout(n.shape, mesh, rng);
    }
    std::string what = "trial " + std::to_string(trial) + " mesh " + mesh.to_string();
    expect_same(ref, s, ref_losses, run_sharded(s, mesh, layouts, 3), what);
  }
}

// Two readers of one value in one part of the step that need different
// layouts: converted straight from the producer, each gathers it; through
// a staging layout the planner names (ShardDecision::via), one gather
// serves both and the second reader only slices. The numbers are the same.
TEST(Partitioner, ReadersThroughAStagingLayoutShareOneConversion) {
  Graph g;
  Value x = g.parameter("x", {6, 4});
  Value a = ops::scale(x, 2.0f), b = ops::scale(x, 3.0f);
  Value out = ops::add(a, b);
  const DeviceMesh mesh({2}, {"m"});
  const Sharding rows{{0, -1}, {}}, whole{{-1, -1}, {}}, cols{{-1, 0}, {}};
  const Tensor data = testing::random_tensor({6, 4}, 3);
  auto run = [&](bool staged) {
    PartitionRequest r;
    r.leaves[x.id] = rows;
    r.decisions[a.id] = {{whole}, whole};
    r.decisions[b.id] = {{cols}, cols};
    r.decisions[out.id] = {{whole, whole}, whole};  // b gathered back: one more gather either way
    if (staged) r.decisions[b.id].via = {whole};
    ShardedExecutor exec(g, mesh, r, {out.id});
    for (int d = 0; d < mesh.size(); ++d) exec.bind(d, x.id, block_of(data, rows, mesh, d));
    exec.run();
    int moves = 0;
    for (const CollectiveRecord& c : exec.partition().collectives)
      moves += c.kind == "all_gather" || c.kind == "all_to_all";
    return std::make_pair(moves, exec.output(0).clone());
  };
  const auto [direct_moves, direct] = run(false);
  const auto [staged_moves, staged] = run(true);
  EXPECT_EQ(direct_moves, 3);  // a and out gather, b's rows become columns (all-to-all)
  EXPECT_EQ(staged_moves, 2);
  Tensor want = data.clone();  // 2x + 3x
  for (int64_t i = 0; i < want.numel(); ++i) want.f32()[i] *= 5;
  EXPECT_LT(max_relative_error(direct, want), 1e-6);
  EXPECT_LT(max_relative_error(staged, want), 1e-6);
}

// A value whose consumer wants its split on another dimension: one
// all-to-all moves it (1/n of a gather's traffic), for uneven blocks on
// both dimensions, i32 values, a split kept on a third dimension by another
// axis, and two axes trading dimensions (one of them must gather).
struct MovedSplit {
  Shape shape;
  DeviceMesh mesh;
  Sharding from, to;
  int all_to_alls, gathers;
};

TEST(Partitioner, MovingASplitToAnotherDimensionIsOneAllToAll) {
  const std::vector<MovedSplit> cases = {
      {{5, 7}, DeviceMesh({3}, {"m"}), {{0, -1}, {}}, {{-1, 0}, {}}, 1, 0},
      {{7, 2, 5}, DeviceMesh({4}, {"m"}), {{-1, -1, 0}, {}}, {{0, -1, -1}, {}}, 1, 0},
      {{4, 5, 6}, DeviceMesh({2, 3}, {"a", "b"}), {{1, 0, -1}, {}}, {{-1, 0, 1}, {}}, 1, 0},
      {{6, 5}, DeviceMesh({2, 3}, {"a", "b"}), {{0, 1}, {}}, {{1, 0}, {}}, 1, 1},
  };
  for (const MovedSplit& c : cases) {
    for (DType dtype : {DType::F32, DType::I32}) {
      Graph g;
      Value x = dtype == DType::F32 ? g.parameter("x", c.shape) : g.input("x", c.shape, dtype);
      Value out = g.add(Op::Reshape, {x}, ShapeAttrs{c.shape});  // a view: the layout is all
      PartitionRequest r;
      r.leaves[x.id] = c.from;
      r.decisions[out.id] = {{c.to}, c.to};
      ShardedExecutor exec(g, c.mesh, r, {out.id});
      const Tensor data = dtype == DType::F32 ? testing::random_tensor(c.shape, 5)
                                              : testing::random_ids(c.shape, 1000, 5);
      for (int d = 0; d < c.mesh.size(); ++d) exec.bind(d, x.id, block_of(data, c.from, c.mesh, d));
      exec.run();
      const std::string what = c.from.to_string(c.mesh) + " -> " + c.to.to_string(c.mesh);
      int all_to_alls = 0, gathers = 0;
      for (const CollectiveRecord& rec : exec.partition().collectives) {
        all_to_alls += rec.kind == "all_to_all";
        gathers += rec.kind == "all_gather";
      }
      EXPECT_EQ(all_to_alls, c.all_to_alls) << what;
      // Reading the output whole gathers each of its splits once more.
      const int output_gathers = int(
          std::count_if(c.to.dims.begin(), c.to.dims.end(), [](int axis) { return axis >= 0; }));
      EXPECT_EQ(gathers, c.gathers + output_gathers) << what;
      const Tensor& got = exec.output(0);
      ASSERT_EQ(got.shape(), c.shape) << what;
      EXPECT_EQ(std::memcmp(got.raw(), data.raw(), data.nbytes()), 0) << what;
    }
  }
}

}  // namespace
}  // namespace autoshard
