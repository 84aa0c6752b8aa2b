// Where a recomputed GPT's memory per layer goes (issue 59): the rewrite
// keeps one [B, T, C] value per block across the step (the block's input),
// and the buffer plan lays those under the weight gradients of the backward
// pass. What docs/cost-model.md once measured as a second [B, T, C] value
// per layer were gradient buckets' buffers, held for the whole step:
// Megatron's backward all-reduce of each LayerNorm's input gradient,
// bucketed with its gamma and beta. Activation gradients now stay out of
// the buckets (runtime/overlap.h): that all-reduce runs where it is, into
// a buffer of the buffer plan, and only weight gradients are bucketed.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>

#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/overlap.h"
#include "ir/op_def.h"

namespace autoshard {
namespace recompute_memory_test {

constexpr int64_t kBatch = 4, kSeq = 16;

GPT2Config config(int layers) {
  GPT2Config cfg = GPT2Config::preset("test");  // C = 24, 3 heads
  cfg.n_layer = layers;
  return cfg;
}

// Megatron's plan on a model axis of one device, as `autoshard plan --plan
// megatron --mesh model=1 --recompute` lowers it.
Partition recomputed_megatron(int layers) {
  GPT2 model(config(layers), kSeq, 0);
  model.set_recompute(true);
  model.set_distribution(
      std::make_shared<ModelParallel>(DeviceMesh({1}, {"model"}), gpt2_megatron_layout()));
  model.compile(AdamW({.clipnorm = 1.0}), losses::sparse_categorical_crossentropy);
  return model.plan_training({kBatch, kSeq}, {kBatch, kSeq});
}

// How many values of `shape` are alive when the logits ([B, T, vocab]) are
// made, at the turn from the forward to the backward pass: each value from
// its node to its storage's last reader (the executor's liveness).
int alive_at_logits(const Graph& g, const BufferPlan& plan, const std::vector<int>& outputs,
                    const Shape& shape) {
  std::vector<int> last(g.size(), -1);
  for (int i : plan.schedule) {
    last[plan.root[i]] = std::max(last[plan.root[i]], i);
    for (int in : g.node(i).inputs) last[plan.root[in]] = std::max(last[plan.root[in]], i);
  }
  for (int o : outputs) last[plan.root[o]] = INT_MAX;
  const Shape logits{kBatch, kSeq, config(1).vocab_size};
  int at = -1;
  for (int i : plan.schedule)
    if (at < 0 && !g.node(i).is_leaf() && g.node(i).shape == logits) at = i;
  int alive = 0;
  for (int i : plan.schedule) {
    const Node& n = g.node(i);
    alive += !n.is_leaf() && plan.root[i] == i && n.shape == shape && i < at && last[i] > at;
  }
  return alive;
}

struct Measured {
  int hidden_states;           // [B, T, C] values alive when the logits are made
  size_t planned;              // the buffer plan's bytes
  size_t executed;             // the executor's: the plan's and its gradient buckets'
  int64_t bucketed = 0;        // the gradient buckets' elements
  int hidden_all_reduces = 0;  // all-reduces of a [B, T, C] value
  int hidden_bucketed = 0;     // those of them in a bucket
  int64_t weights = 0;         // the parameters' elements (their gradients')
};

Measured measure(int layers) {
  const Partition p = recomputed_megatron(layers);
  const Graph& g = p.local[0];
  const BufferPlan plan = plan_buffers(g, p.outputs[0]);
  const Shape hidden{kBatch, kSeq, config(1).n_embd};
  const int64_t bucket_bytes = 25 << 20;  // DDP's default, the executor's
  Executor executor(g, p.outputs[0]);
  executor.set_overlap(bucket_bytes);
  Measured m{alive_at_logits(g, plan, p.outputs[0], hidden), plan.total_bytes(),
             executor.planned_bytes()};
  for (int i : plan.schedule)
    m.hidden_all_reduces += g.node(i).op == Op::AllReduce && g.node(i).shape == hidden;
  for (const GradientBucket& b : plan_gradient_buckets(g, plan.schedule, bucket_bytes)) {
    m.bucketed += b.count;
    for (int member : b.members) m.hidden_bucketed += g.node(member).shape == hidden;
  }
  for (int id : g.parameters())
    if (!g.node(id).leaf().is_slot() && !g.node(id).leaf().buffer)
      m.weights += numel(g.node(id).shape);
  return m;
}

TEST(RecomputeMemory, OneHiddenStatePerLayerAndNoneInTheGradientBuckets) {
  const Measured two = measure(2), four = measure(4);
  const int64_t btc = kBatch * kSeq * config(1).n_embd, c = config(1).n_embd;
  // The rewrite: each block's input alone stays across the step; a second
  // value per block (a LayerNorm's output, the residual) would make this 2.
  EXPECT_EQ((four.hidden_states - two.hidden_states) / 2, 1);
  // The buffer plan: those inputs die at their block's recomputation, before
  // the earlier blocks' weight gradients are made, so they share buffers
  // with them; per layer the plan grows by the gradients alone.
  const double per_layer_weights = double(four.weights - two.weights) / 2;
  const double per_layer_planned = double(four.planned - two.planned) / 2;
  EXPECT_LE(per_layer_planned, per_layer_weights * 4);
  EXPECT_GT(per_layer_planned, per_layer_weights * 4 - double(btc) * 4 / 2);
  // Per layer, six all-reduces of a [B, T, C] value: the forward's two of
  // the row-parallel products (attention's projection, the MLP's output),
  // run again at recomputation, and the backward's two of the LayerNorms'
  // input gradients (the column-parallel products' partial sums)...
  EXPECT_EQ((four.hidden_all_reduces - two.hidden_all_reduces) / 2, 6);
  // ... and none is bucketed. The backward's two were: two buckets of
  // [B, T, C] (with gamma and beta) per layer, each held for the whole step.
  EXPECT_EQ(two.hidden_bucketed, 0);
  EXPECT_EQ(four.hidden_bucketed, 0);
  // The buckets keep the weight gradients reduced over the axis: each
  // LayerNorm's gamma and beta (C each, aligned to 16 elements), far less
  // than one [B, T, C] value per layer.
  const int64_t per_layer_bucketed = (four.bucketed - two.bucketed) / 2;
  EXPECT_GE(per_layer_bucketed, 4 * c);
  EXPECT_LE(per_layer_bucketed, 4 * ((c + 15) / 16 * 16));
  // What the executor holds grows per layer by the weight gradients and
  // those buckets alone: no [B, T, C] value more than the plan.
  const double per_layer_executed = double(four.executed - two.executed) / 2;
  EXPECT_DOUBLE_EQ(per_layer_executed, per_layer_planned + double(per_layer_bucketed) * 4);
  EXPECT_LT(per_layer_executed, per_layer_weights * 4 + double(btc) * 4 / 2);
}

}  // namespace recompute_memory_test
}  // namespace autoshard
