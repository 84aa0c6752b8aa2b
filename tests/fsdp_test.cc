// Fully sharded data parallelism (FSDP, ZeRO-3): every weight split over the
// data axis, gathered where it is read, its gradient reduce-scattered. GPT-2
// (tied embedding and head, dropout) and Llama train on even and uneven data
// axes, and beside Megatron's model axis, with one device's losses and
// weights; a device holds its block of each weight and its state only.
#include <gtest/gtest.h>

#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "small_models.h"
#include "test_util.h"

namespace autoshard {
namespace {

TEST(Fsdp, SplitsEachWeightOverTheDataAxisAlongItsLargestWholeDimension) {
  const FullyShardedDataParallel fsdp(DeviceMesh({4}, {"data"}));
  EXPECT_EQ(fsdp.weight_layout("w", {128, 512}).dims, (std::vector<int>{-1, 0}));
  EXPECT_EQ(fsdp.weight_layout("w", {512, 128}).dims, (std::vector<int>{0, -1}));
  EXPECT_EQ(fsdp.weight_layout("w", {64, 4, 64}).dims, (std::vector<int>{0, -1, -1}));
  EXPECT_EQ(fsdp.weight_layout("b", {3}).dims, (std::vector<int>{0}));  // blocks 1 1 1 0
  EXPECT_EQ(fsdp.weight_layout("s", {}).dims, (std::vector<int>{}));
  // Beside Megatron's model axis: the data axis takes the dimension Megatron
  // leaves whole, and a weight Megatron splits on its largest keeps that.
  const FullyShardedDataParallel tp(DeviceMesh({2, 2}, {"data", "model"}), gpt2_megatron_layout());
  EXPECT_EQ(tp.weight_layout("h.0.mlp.c_fc.kernel", {16, 64}).dims, (std::vector<int>{0, 1}));
  EXPECT_EQ(tp.weight_layout("h.0.mlp.c_proj.kernel", {64, 16}).dims, (std::vector<int>{1, 0}));
  EXPECT_EQ(tp.weight_layout("h.0.ln_1.gamma", {16}).dims, (std::vector<int>{0}));
  // No data axis: nothing to shard over.
  const FullyShardedDataParallel none(DeviceMesh({2}, {"model"}));
  EXPECT_EQ(none.weight_layout("w", {8, 8}).dims, (std::vector<int>{-1, -1}));
  // Without a layout map on a mesh of two axes: the batch and every weight
  // over both (a tuple), so a device holds a quarter of each.
  const FullyShardedDataParallel every(DeviceMesh({2, 2}, {"data", "shard"}));
  const int both = tuple_axis({0, 1});
  EXPECT_EQ(every.batch_axis(), both);
  EXPECT_EQ(every.input_layout({8, 6}).dims, (std::vector<int>{both, -1}));
  EXPECT_EQ(every.weight_layout("w", {128, 512}).dims, (std::vector<int>{-1, both}));
  EXPECT_EQ(every.weight_layout("b", {3}).dims, (std::vector<int>{both}));
}

std::unique_ptr<Model> build(const std::string& which, int64_t seq) {
  if (which == "llama") return std::make_unique<Llama>(testing::small_llama_config(), seq, 5);
  GPT2Config cfg = GPT2Config::preset("test");
  if (which == "gpt2-dropout") cfg.dropout = 0.2;
  return std::make_unique<GPT2>(cfg, seq, 5);
}

std::shared_ptr<Optimizer> adamw() {
  // epsilon 1e-3: see partitioner_test.cc (gradients near Adam's epsilon
  // turn their rounding into whole steps).
  return AdamW({.learning_rate = 1e-2, .epsilon = 1e-3, .weight_decay = 0.1, .clipnorm = 0.5});
}

std::shared_ptr<Distribution> fsdp(const std::string& model, const std::string& mesh_text) {
  const DeviceMesh mesh = DeviceMesh::parse(mesh_text);
  LayoutMap megatron;
  if (mesh.axis_index("model") >= 0)
    megatron = model == "llama" ? llama_megatron_layout(testing::small_llama_config())
                                : gpt2_megatron_layout();
  return std::make_shared<FullyShardedDataParallel>(mesh, megatron);
}

TEST(Fsdp, TrainsGpt2AndLlamaAsOneDevice) {
  struct Case {
    std::string model, mesh;
    int64_t batch;
  };
  const std::vector<Case> cases = {
      {"gpt2", "data=4", 8},
      {"gpt2", "data=3", 7},  // uneven weights and batch
      {"gpt2-dropout", "data=4", 8},
      {"gpt2", "data=2,model=2", 6},
      {"llama", "data=4", 8},
      {"llama", "data=3", 5},
      {"llama", "data=2,model=2", 4},
      // Over every device of a two-axis mesh (no model axis: a tuple of both).
      {"gpt2", "data=2,shard=3", 7},
      {"llama", "data=2,shard=2", 4},
  };
  const int64_t T = 6;
  for (const Case& c : cases) {
    const std::string what = c.model + " on " + c.mesh;
    std::unique_ptr<Model> one = build(c.model, T), sharded = build(c.model, T);
    one->compile(adamw(), losses::sparse_categorical_crossentropy);
    sharded->set_distribution(fsdp(c.model, c.mesh));
    sharded->compile(adamw(), losses::sparse_categorical_crossentropy);
    const int32_t vocab = c.model == "llama" ? 61 : 67;
    for (int step = 0; step < 3; ++step) {
      const Tensor x = testing::random_ids({c.batch, T}, vocab, 10 + step);
      const Tensor y = testing::random_ids({c.batch, T}, vocab, 20 + step);
      const double want = one->train_on_batch(x, y), got = sharded->train_on_batch(x, y);
      EXPECT_NEAR(got, want, 1e-5 * std::fabs(want)) << what << " step " << step + 1;
    }
    for (const std::string& path : one->weight_paths())
      EXPECT_LT(max_relative_error(sharded->gather_weight(path), one->gather_weight(path)), 1e-4)
          << what << " " << path;
  }
}

// Evaluation and prediction steps (no optimizer update, so no value the
// decisions could reach from an update) give one device's numbers.
TEST(Fsdp, EvaluatesAndPredictsAsOneDevice) {
  std::unique_ptr<Model> one = build("gpt2", 6), sharded = build("gpt2", 6);
  one->compile(adamw(), losses::sparse_categorical_crossentropy);
  sharded->set_distribution(fsdp("gpt2", "data=4"));
  sharded->compile(adamw(), losses::sparse_categorical_crossentropy);
  const Tensor x = testing::random_ids({8, 6}, 67, 31), y = testing::random_ids({8, 6}, 67, 32);
  EXPECT_NEAR(sharded->test_on_batch(x, y), one->test_on_batch(x, y), 1e-5);
  EXPECT_LT(max_relative_error(sharded->predict_on_batch(x), one->predict_on_batch(x)), 1e-5);
}

// Device 0's bytes of weights and optimizer state (its parameter blocks), and
// the bytes each kind of collective moves in one step.
struct DeviceView {
  int64_t parameter_bytes = 0;
  std::map<std::string, int64_t> collective_bytes;
  std::map<std::string, int> collective_count;
};

DeviceView device_view(std::shared_ptr<Distribution> dist) {
  std::unique_ptr<Model> m = build("gpt2", 6);
  m->set_distribution(std::move(dist));
  m->compile(adamw(), losses::sparse_categorical_crossentropy);
  const Partition p = m->plan_training({8, 6}, {8, 6});
  DeviceView v;
  const Graph& local = p.local[0];
  for (int id = 0; id < local.size(); ++id)
    if (local.node(id).op == Op::Parameter) v.parameter_bytes += numel(local.node(id).shape) * 4;
  for (const CollectiveRecord& c : p.collectives) {
    v.collective_bytes[c.kind] += c.bytes;
    ++v.collective_count[c.kind];
  }
  return v;
}

// Under FSDP on data=4 a device holds a quarter of the weights and their
// Adam state (GPT-2 `test`'s sizes are all multiples of 4), gathers weights
// instead of all-reducing gradients, and reduce-scatters every gradient.
TEST(Fsdp, HoldsItsBlockOfEachWeightAndReduceScattersGradients) {
  const DeviceMesh mesh({4}, {"data"});
  const DeviceView data = device_view(std::make_shared<DataParallel>(mesh));
  const DeviceView full = device_view(std::make_shared<FullyShardedDataParallel>(mesh));
  // (Vocabulary 67: device 0 holds 17 of its rows.)
  EXPECT_NEAR(double(full.parameter_bytes * 4), double(data.parameter_bytes),
              0.01 * double(data.parameter_bytes));
  EXPECT_GT(full.collective_count.at("all_gather"), 0);
  EXPECT_GT(full.collective_count.at("reduce_scatter"), 0);
  // Only the loss and the global norm are still all-reduced: scalars.
  EXPECT_LT(full.collective_bytes.count("all_reduce") ? full.collective_bytes.at("all_reduce") : 0,
            64);
  EXPECT_EQ(full.collective_count.count("all_to_all"), 0u);  // no activation moved
  EXPECT_EQ(data.collective_count.count("reduce_scatter"), 0u);
}

}  // namespace
}  // namespace autoshard
