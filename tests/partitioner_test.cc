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
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/nn/losses.h"
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

// Each mesh axis on a random dimension or none; axes that meet on one
// dimension split it together (a tuple).
Sharding random_layout(const Shape& shape, const DeviceMesh& mesh, std::mt19937& rng) {
  std::vector<std::vector<int>> members(shape.size());
  for (int a = 0; a < mesh.rank(); ++a) {
    const size_t d = rng() % (shape.size() + 1);  // shape.size(): leave this axis unused
    if (d < shape.size()) members[d].push_back(a);
  }
  Sharding s = Sharding::replicated(shape.size());
  for (size_t d = 0; d < shape.size(); ++d)
    if (!members[d].empty()) s.dims[d] = tuple_axis(members[d]);
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

// Every layout of a rank-`rank` value on `mesh`: each mesh axis on one
// dimension or none; axes on one dimension form a tuple in mesh order.
std::vector<Sharding> every_layout(int rank, const DeviceMesh& mesh) {
  std::vector<Sharding> out;
  int count = 1;
  for (int a = 0; a < mesh.rank(); ++a) count *= rank + 1;
  for (int code = 0; code < count; ++code) {
    std::vector<std::vector<int>> members(static_cast<size_t>(rank));
    for (int a = 0, rest = code; a < mesh.rank(); ++a, rest /= rank + 1)
      if (rest % (rank + 1) < rank) members[size_t(rest % (rank + 1))].push_back(a);
    Sharding s = Sharding::replicated(rank);
    for (int d = 0; d < rank; ++d)
      if (!members[size_t(d)].empty()) s.dims[size_t(d)] = tuple_axis(members[size_t(d)]);
    out.push_back(s);
  }
  return out;
}

struct Converted {
  Tensor value;
  std::map<std::string, int> collectives;  // by kind, the value's own (not the output's)
};

// `data` laid out as `from` (partial sums over from.partial: device blocks
// of a sum over a leading dimension of 4), converted to `to` by a view
// whose decision wants it so, then read whole.
Converted convert(const Tensor& data, const DeviceMesh& mesh, const Sharding& from,
                  const Sharding& to) {
  Graph g;
  const Shape& shape = data.shape();
  PartitionRequest r;
  Value x, leaf;
  Tensor fed = data;
  Sharding fed_layout = from;
  if (from.partial.empty()) {
    x = leaf = g.parameter("x", shape);
    r.leaves[x.id] = from;
  } else {  // four terms summing to data, the sum over axis 0 split over the partial axes
    Shape terms{4};
    terms.insert(terms.end(), shape.begin(), shape.end());
    Value y = leaf = g.parameter("y", terms);
    fed = testing::random_tensor(terms, 9);
    for (int64_t i = 0; i < data.numel(); ++i) {  // make the terms add up to data
      float rest = data.f32()[i];
      for (int k = 1; k < 4; ++k) rest -= fed.f32()[k * data.numel() + i];
      fed.f32()[i] = rest;
    }
    fed_layout = Sharding{{tuple_axis(from.partial)}, {}};
    fed_layout.dims.insert(fed_layout.dims.end(), from.dims.begin(), from.dims.end());
    x = ops::reduce_sum(y, {0});
    r.leaves[y.id] = fed_layout;
    r.decisions[x.id] = {{fed_layout}, from};
  }
  Value out = g.add(Op::Reshape, {x}, ShapeAttrs{shape});
  r.decisions[out.id] = {{to}, to};
  ShardedExecutor exec(g, mesh, r, {out.id});
  for (int d = 0; d < mesh.size(); ++d) exec.bind(d, leaf.id, block_of(fed, fed_layout, mesh, d));
  exec.run();
  Converted c{exec.output(0).clone(), {}};
  for (const CollectiveRecord& rec : exec.partition().collectives)
    if (rec.value.find("reshape") == std::string::npos) ++c.collectives[rec.kind];
  return c;
}

// `s` partial over every set of the mesh axes it leaves unused.
std::vector<Sharding> with_partials(const Sharding& s, const DeviceMesh& mesh) {
  std::vector<int> unused;
  for (int a = 0; a < mesh.rank(); ++a)
    if (!s.uses(a)) unused.push_back(a);
  std::vector<Sharding> out;
  for (int set = 1; set < 1 << unused.size(); ++set) {
    Sharding p = s;
    for (size_t i = 0; i < unused.size(); ++i)
      if (set >> i & 1) p.partial.push_back(unused[i]);
    out.push_back(p);
  }
  return out;
}

// Dimensions split over several mesh axes at once (tuples, nested
// array_split): every pair of layouts of a 7x5 value on a 2x3 mesh (tuples
// on either dimension, uneven everywhere) converts bit for bit, and from
// partial sums over any unused axes to float tolerance; on a 2x2x2 mesh,
// every layout into and out of a tuple.
TEST(Partitioner, EveryPairOfLayoutsWithTuplesConvertsExactly) {
  for (const auto& [mesh, shape] : std::vector<std::pair<DeviceMesh, Shape>>{
           {DeviceMesh({2, 3}, {"a", "b"}), {7, 5}},
           {DeviceMesh({2, 2, 2}, {"x", "y", "z"}), {5, 3}}}) {
    const Tensor data = testing::random_tensor(shape, 4);
    const std::vector<Sharding> layouts = every_layout(int(shape.size()), mesh);
    auto has_tuple = [](const Sharding& s) {
      return std::any_of(s.dims.begin(), s.dims.end(), is_tuple_axis);
    };
    int tuples = 0, partial = 0;
    for (const Sharding& from : layouts)
      for (const Sharding& to : layouts) {
        if (mesh.rank() == 3 && !(from.fully_replicated() || to.fully_replicated()) &&
            !(has_tuple(from) && has_tuple(to)))
          continue;  // the 2x2x2 mesh: a tuple in or out, or both
        tuples += has_tuple(from) || has_tuple(to);
        const std::string what = from.to_string(mesh) + " -> " + to.to_string(mesh);
        const Converted c = convert(data, mesh, from, to);
        ASSERT_EQ(std::memcmp(c.value.raw(), data.raw(), data.nbytes()), 0) << what;
        if (mesh.rank() == 3) continue;
        for (const Sharding& summed : with_partials(from, mesh)) {
          ++partial;
          EXPECT_LT(max_relative_error(convert(data, mesh, summed, to).value, data), 1e-5)
              << summed.to_string(mesh) << " -> " << to.to_string(mesh);
        }
      }
    EXPECT_GT(tuples, 30) << mesh.to_string();
    if (mesh.rank() == 2) {
      EXPECT_GT(partial, 50);
    }
  }
}

// What a conversion between a split and a tuple costs: adding the inner
// member is a local slice, removing it one gather over that axis; partial
// sums over both members reduce-scatter straight into the tuple's pieces,
// in one collective where the members are a run of the mesh's axes.
TEST(Partitioner, TuplesGrowAndShrinkByTheirInnerMember) {
  const DeviceMesh mesh({2, 3}, {"a", "b"});
  const int ab = tuple_axis({0, 1});
  const Tensor data = testing::random_tensor({11, 4}, 6);
  const Sharding a{{0, -1}, {}}, tuple{{ab, -1}, {}}, whole{{-1, -1}, {}};
  EXPECT_TRUE(convert(data, mesh, a, tuple).collectives.empty());
  EXPECT_EQ(convert(data, mesh, tuple, a).collectives,
            (std::map<std::string, int>{{"all_gather", 1}}));
  // Removing both members, or reduce-scattering into both: one collective
  // over the joint group (the whole 2x3 mesh).
  EXPECT_EQ(convert(data, mesh, tuple, whole).collectives,
            (std::map<std::string, int>{{"all_gather", 1}}));
  const Converted summed = convert(data, mesh, Sharding{{-1, -1}, {0, 1}}, tuple);
  EXPECT_EQ(summed.collectives, (std::map<std::string, int>{{"reduce_scatter", 1}}));
  // On a 2x2x2 mesh (x, z) is no run of axes: member by member.
  const DeviceMesh cube({2, 2, 2}, {"x", "y", "z"});
  const Sharding xz{{tuple_axis({0, 2}), -1}, {}};
  EXPECT_EQ(convert(data, cube, xz, whole).collectives,
            (std::map<std::string, int>{{"all_gather", 2}}));
  EXPECT_EQ(convert(data, cube, Sharding{{-1, -1}, {0, 2}}, xz).collectives,
            (std::map<std::string, int>{{"reduce_scatter", 2}}));
  EXPECT_LT(max_relative_error(summed.value, data), 1e-6);
  // A dimension over (a, b) holds nested array_split pieces: 11 over a gives
  // 6 and 5, each over b gives 2 2 2 and 2 2 1.
  std::vector<int64_t> rows, offsets;
  for (int d = 0; d < mesh.size(); ++d) {
    rows.push_back(tuple.local_shape(data.shape(), mesh, d)[0]);
    offsets.push_back(tuple.offsets(data.shape(), mesh, d)[0]);
  }
  EXPECT_EQ(rows, (std::vector<int64_t>{2, 2, 2, 2, 2, 1}));
  EXPECT_EQ(offsets, (std::vector<int64_t>{0, 2, 4, 6, 8, 10}));
  EXPECT_EQ(mesh.coordinate(4, ab), 4);
  EXPECT_EQ(mesh.group(4, ab), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(tuple.to_string(mesh), "[(a,b), -]");
  EXPECT_THROW((Sharding{{ab, 1}, {}}.validate(mesh, 2, "x")), std::exception);  // b twice
}

}  // namespace
}  // namespace autoshard
