// Gradient buckets (runtime/overlap.h): reducing data-parallel gradients in
// buckets behind the backward pass gives bitwise the losses and weights of
// reducing each gradient where the optimizer reads it, on data=2 and
// data=2,model=2; the buckets start after their last gradient and are
// waited for before their first reader; the cost model's step is the
// overlapped timeline, checked against a hand-computed case.
#include "autoshard/runtime/overlap.h"

#include <gtest/gtest.h>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/nn/losses.h"
#include "autoshard/plan/cost_model.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/executor.h"
#include "test_util.h"

namespace autoshard {
namespace {

// Restores the process's overlap setting when a test ends.
class Overlap : public ::testing::Test {
 protected:
  void TearDown() override { set_overlap_options(saved_); }
  OverlapOptions saved_ = overlap_options();
};

struct TrainedRun {
  std::vector<double> losses;
  std::map<std::string, Tensor> weights;
};

// Trains a test GPT-2 for 3 steps on `plan` with the given overlap setting.
// With clipping the gradient norm is every bucket's first reader; without,
// each update waits for its own bucket.
TrainedRun train(const std::shared_ptr<Distribution>& plan, OverlapOptions options, double clip) {
  set_overlap_options(options);
  GPT2 m(GPT2Config::preset("test"), 6, 11);
  m.set_distribution(plan);
  m.compile(AdamW({.learning_rate = 1e-2, .epsilon = 1e-3, .clipnorm = clip}),
            losses::sparse_categorical_crossentropy);
  TrainedRun r;
  for (int s = 0; s < 3; ++s)
    r.losses.push_back(m.train_on_batch(testing::random_ids({8, 6}, 67, 500 + s),
                                        testing::random_ids({8, 6}, 67, 900 + s)));
  for (const std::string& path : m.weight_paths()) r.weights[path] = m.gather_weight(path);
  return r;
}

void expect_bitwise(const TrainedRun& got, const TrainedRun& want, const std::string& what) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_EQ(got.losses[s], want.losses[s]) << what << ", step " << s;
  for (const auto& [path, w] : want.weights)
    EXPECT_EQ(max_abs_diff(got.weights.at(path), w), 0.0) << what << ", " << path;
}

TEST_F(Overlap, BucketsGiveBitwiseTheUnbucketedLossesAndWeights) {
  for (const char* mesh : {"data=2", "data=2,model=2"}) {
    // One plan for every run: the same program, bucketed or not.
    const auto plan = std::make_shared<AutoShard>(DeviceMesh::parse(mesh));
    for (double clip : {0.0, 1.0}) {
      const TrainedRun plain = train(plan, {false, 0}, clip);
      // 4 KiB: many buckets; 25 MiB: DDP's default, one bucket here.
      for (int64_t bytes : {int64_t{4} << 10, int64_t{25} << 20})
        expect_bitwise(train(plan, {true, bytes}, clip), plain,
                       std::string(mesh) + " clip " + std::to_string(clip) + " buckets of " +
                           std::to_string(bytes));
    }
  }
}

// A data-parallel step of a test GPT-2 (batch split over `data`), for device 0.
struct DataParallelStep {
  Graph graph;
  Partition partition;
  BufferPlan buffers;
};

DataParallelStep data_parallel_step(double clip) {
  DataParallelStep s;
  GPT2 model(GPT2Config::preset("test"), 6, 11);
  Value logits = model.trace_forward(s.graph, 4, /*training=*/false);
  Value y = s.graph.input("y", {4, 6}, DType::I32);
  Value loss = losses::sparse_categorical_crossentropy(logits, y);
  std::vector<Value> params;
  for (int id : s.graph.parameters()) params.push_back(s.graph.value(id));
  AdamW({.learning_rate = 1e-2, .clipnorm = clip})
      ->append_update(s.graph, params, gradients(loss, params));
  const DeviceMesh mesh = DeviceMesh::parse("data=2");
  std::map<int, Sharding> layouts;
  for (int id : s.graph.inputs()) layouts[id] = Sharding{{0, -1}, {}};
  s.partition = partition(s.graph, mesh, layouts, {loss.id}, {0});
  s.buffers = plan_buffers(s.partition.local[0], s.partition.outputs[0]);
  return s;
}

// Megatron's layout: its backward all-reduces of the LayerNorms' input
// gradients run unbucketed where they are, beside the weight gradients'
// buckets (over data, and gamma and beta over model), and the numbers are
// still bitwise those of no buckets at all.
TEST_F(Overlap, MegatronsActivationGradientsRunUnbucketedWithTheSameNumbers) {
  const auto plan =
      std::make_shared<ModelParallel>(DeviceMesh::parse("data=2,model=2"), gpt2_megatron_layout());
  for (double clip : {0.0, 1.0})
    expect_bitwise(train(plan, {true, int64_t{25} << 20}, clip), train(plan, {false, 0}, clip),
                   "megatron clip " + std::to_string(clip));

  GPT2 model(GPT2Config::preset("test"), 6, 11);
  model.set_distribution(plan);
  model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const Partition p = model.plan_training({8, 6}, {8, 6});
  const Graph& g = p.local[0];
  const std::vector<int> order = plan_buffers(g, p.outputs[0]).schedule;
  const Shape hidden{4, 6, GPT2Config::preset("test").n_embd};  // the batch split over data
  int bucketed_hidden = 0, members = 0;
  for (const GradientBucket& b : plan_gradient_buckets(g, order, int64_t{25} << 20))
    for (int m : b.members) ++members, bucketed_hidden += g.node(m).shape == hidden;
  int hidden_all_reduces = 0;
  for (int i : order)
    hidden_all_reduces += g.node(i).op == Op::AllReduce && g.node(i).shape == hidden;
  EXPECT_GT(hidden_all_reduces, 0);
  EXPECT_EQ(bucketed_hidden, 0);
  EXPECT_GT(members, 0) << "the weight gradients are still bucketed";
}

TEST_F(Overlap, BucketsStartAfterTheirGradientsAndWaitBeforeTheirReaders) {
  const DataParallelStep s = data_parallel_step(0);
  const Graph& g = s.partition.local[0];
  const std::vector<int>& order = s.buffers.schedule;
  std::vector<int> pos(g.size(), -1);
  for (size_t k = 0; k < order.size(); ++k) pos[order[k]] = static_cast<int>(k);
  int all_reduces = 0;
  for (int i : order) all_reduces += g.node(i).op == Op::AllReduce;

  const std::vector<GradientBucket> one = plan_gradient_buckets(g, order, int64_t{1} << 40);
  const std::vector<GradientBucket> many = plan_gradient_buckets(g, order, 4);
  ASSERT_FALSE(one.empty());
  size_t members = 0;
  for (const GradientBucket& b : many) members += b.members.size();
  EXPECT_EQ(members, many.size()) << "4-byte buckets hold one gradient each";
  EXPECT_EQ(static_cast<int>(members), all_reduces) << "every gradient all-reduce is bucketed";
  EXPECT_LT(one.size(), many.size());
  for (const auto* plan : {&one, &many})
    for (const GradientBucket& b : *plan) {
      EXPECT_LT(b.start_after, b.wait_before);
      EXPECT_EQ(b.offsets.size(), b.members.size());
      for (size_t m = 0; m < b.members.size(); ++m) {
        const Node& ar = g.node(b.members[m]);
        EXPECT_LE(pos[ar.inputs[0]], b.start_after) << "started before its gradient is made";
        EXPECT_GE(pos[b.members[m]], b.wait_before) << "read before it is waited for";
        EXPECT_EQ(b.offsets[m] % 16, 0) << "64-byte aligned";
      }
    }
  // Without clipping the first bucket starts long before the backward pass
  // ends (the last layer's gradients are made first).
  EXPECT_LT(many.front().start_after, many.back().start_after);
}

TEST_F(Overlap, BadBucketSizesAreOneErrorNamingTheFlag) {
  for (double mb : {0.0, -1.0, 1e30})
    EXPECT_THROW(
        {
          try {
            bucket_bytes_from_mb(mb);
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("--bucket-mb"), std::string::npos) << e.what();
            EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
            throw;
          }
        },
        Error);
  EXPECT_EQ(bucket_bytes_from_mb(25), int64_t{25} << 20);
}

// The step of a cluster whose link makes every bucket longer than what
// follows it: compute up to the last bucket's start, then the buckets back
// to back, then what reads the last one. Checked against the same sums made
// by hand from op_seconds and collective_seconds.
TEST_F(Overlap, PredictionIsTheOverlappedTimeline) {
  const DataParallelStep s = data_parallel_step(0);
  const Graph& g = s.partition.local[0];
  const std::vector<int>& order = s.buffers.schedule;
  Cluster c = Cluster::preset("a100-80g");
  c.links.back().bandwidth = 1e6;  // slow: communication dominates
  for (LinkLevel& l : c.links) l.bandwidth = 1e6;
  const int64_t bytes = 16 << 10;
  set_overlap_options({true, bytes});
  const std::vector<GradientBucket> buckets = plan_gradient_buckets(g, order, bytes);
  ASSERT_GE(buckets.size(), 2u);

  // By hand: each op's time, the buckets' all-reduce times.
  std::vector<bool> member(g.size(), false);
  for (const GradientBucket& b : buckets)
    for (int m : b.members) member[m] = true;
  std::vector<double> op_time(order.size(), 0);
  double compute = 0;
  for (size_t k = 0; k < order.size(); ++k) {
    const Node& n = g.node(order[k]);
    // Folded sums run no kernel (BufferPlan::sum_view).
    if (n.is_leaf() || member[order[k]] || s.buffers.sum_view[order[k]] >= 0) continue;
    ASSERT_NE(n.op, Op::AllReduce) << "every all-reduce is a bucket's here";
    std::vector<Shape> in;
    for (int x : n.inputs) in.push_back(g.node(x).shape);
    op_time[k] = op_seconds(c, n, in, n.shape, 2, false);
    compute += op_time[k];
  }
  const auto before = [&](int end) {  // compute of positions [0, end)
    double t = 0;
    for (int k = 0; k < end; ++k) t += op_time[k];
    return t;
  };
  // The lane: bucket b starts at max(its start point, the previous end).
  double lane = 0, comm = 0;
  for (const GradientBucket& b : buckets) {
    const double t = collective_seconds(c, s.partition.mesh, b.axis, true, double(b.count) * 4, 0);
    comm += t;
    lane = std::max(lane, before(b.start_after + 1)) + t;
  }
  // The last bucket is read by the last updates: after it, those remain.
  const int last_wait = buckets.back().wait_before;
  double after_last = 0;
  for (size_t k = last_wait; k < order.size(); ++k) after_last += op_time[k];
  double first_reads = 0;  // waits before the last: all earlier buckets are done by lane
  (void)first_reads;
  const double want = std::max(lane, before(last_wait)) + after_last;

  const StepPrediction p = predict(s.partition, c, {});
  EXPECT_NEAR(p.compute_s, compute, 1e-9 * compute);
  EXPECT_NEAR(p.communication_s, comm, 1e-9 * comm);
  EXPECT_GT(comm, compute) << "the link is the bottleneck";
  EXPECT_NEAR(p.step_s, want, 1e-9 * want);
  EXPECT_LT(p.step_s, p.compute_s + p.communication_s);
  EXPECT_NEAR(p.hidden_communication_s, compute + comm - want, 1e-9 * want);

  // Off: the sum, as before.
  set_overlap_options({false, bytes});
  const StepPrediction serial = predict(s.partition, c, {});
  EXPECT_NEAR(serial.step_s, serial.compute_s + serial.communication_s, 1e-12);
}

}  // namespace
}  // namespace autoshard
