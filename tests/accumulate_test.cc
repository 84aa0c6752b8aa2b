// Gradient accumulation in place (Op::Accumulate): over a step's
// micro-batches a sum holds exactly what adding each micro-batch's value
// gives, whether the value's product or scatter is fused into the sum (no
// buffer or pass of its own) or added after it; and on a data axis the sum
// stays partial, so no micro-batch reduces anything.
#include <gtest/gtest.h>

#include "autoshard/ir/ops.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/runtime/sharded_executor.h"
#include "test_util.h"

namespace autoshard {
namespace {

struct Sums {
  Graph g;
  int a = -1, b = -1, ids = -1, dy = -1;  // the micro-batch's inputs
  std::vector<int> sums, values;          // per case: the sum and the value added into it
};

// Products whose output BLAS writes straight ("bi,bj->ij"), transposed
// ("bi,bj->ji") or through a permuted copy ("hbi,hbj->ihj"); one that
// cannot fuse (scaled after the product); a scatter (an embedding's
// gradient).
Sums build() {
  Sums s;
  const Value a = s.g.input("a", {2, 4, 3}), b = s.g.input("b", {2, 4, 5});
  const Value ids = s.g.input("ids", {4}, DType::I32), dy = s.g.input("dy", {4, 3});
  s.a = a.id, s.b = b.id, s.ids = ids.id, s.dy = dy.id;
  const Value a0 = ops::reduce_sum(a, {0}), b0 = ops::reduce_sum(b, {0});
  const std::vector<Value> values = {
      ops::einsum("bi,bj->ij", a0, b0), ops::einsum("bi,bj->ji", a0, b0),
      ops::einsum("hbi,hbj->ihj", a, b), ops::scale(ops::einsum("bi,bj->ij", a0, b0), 0.5),
      s.g.add(Op::ScatterAdd, {ids, dy}, ScatterAddAttrs{{7, 3}, {}})};
  for (size_t k = 0; k < values.size(); ++k) {
    const Value sum = s.g.input("sum" + std::to_string(k), values[k].shape());
    s.g.add(Op::Accumulate, {sum, values[k]});
    s.sums.push_back(sum.id);
    s.values.push_back(values[k].id);
  }
  return s;
}

std::map<int, Tensor> microbatch(const Sums& s, int m) {
  return {{s.a, testing::random_tensor({2, 4, 3}, 10 + m)},
          {s.b, testing::random_tensor({2, 4, 5}, 20 + m)},
          {s.ids, testing::random_ids({4}, 7, 30 + m)},
          {s.dy, testing::random_tensor({4, 3}, 40 + m)}};
}

// What the sums should hold after micro-batches 0..M-1: each value alone,
// added up here.
std::vector<Tensor> expected(const Sums& s, int M) {
  std::vector<Tensor> want;
  for (int m = 0; m < M; ++m) {
    Executor e(s.g, s.values);
    for (const auto& [id, t] : microbatch(s, m)) e.bind(id, t);
    for (int sum : s.sums) e.bind(sum, Tensor(s.g.node(sum).shape));
    e.run();
    for (size_t k = 0; k < s.values.size(); ++k) {
      const Tensor& v = e.value(s.values[k]);
      if (m == 0) want.push_back(v.clone());
      for (int64_t i = 0; m > 0 && i < v.numel(); ++i) want[k].f32()[i] += v.f32()[i];
    }
  }
  return want;
}

TEST(Accumulate, SumsMicroBatchesFusedOrNot) {
  const Sums s = build();
  const BufferPlan plan = plan_buffers(s.g, {});
  for (size_t k = 0; k < s.values.size(); ++k)
    EXPECT_EQ(plan.fused_sum[s.values[k]], k == 3 ? -1 : s.sums[k]) << "value " << k;
  Executor e(s.g, {});
  std::vector<Tensor> sums;
  for (int sum : s.sums) {
    sums.push_back(Tensor::full(s.g.node(sum).shape, 1e3f));  // the last step's: overwritten
    e.bind(sum, sums.back());
  }
  const int M = 3;
  for (int m = 0; m < M; ++m) {
    std::map<int, Tensor> inputs = microbatch(s, m);
    for (const auto& [id, t] : inputs) e.bind(id, t);
    e.run({.step = 1, .lr = 0, .microbatch = m});
  }
  const std::vector<Tensor> want = expected(s, M);
  for (size_t k = 0; k < sums.size(); ++k)
    EXPECT_LT(max_relative_error(sums[k], want[k]), 1e-6) << "value " << k;
}

// On data=2 with the batch split, a product's sum stays partial over data:
// the devices' blocks add up to the sum, and no collective runs.
TEST(Accumulate, PartialSumsOnADataAxisAreNeverReduced) {
  Graph g;
  const Value a = g.input("a", {4, 3}), b = g.input("b", {4, 5});
  const Value sum = g.input("sum", {3, 5});
  g.add(Op::Accumulate, {sum, ops::einsum("bi,bj->ij", a, b)});
  const DeviceMesh mesh({2}, {"data"});
  const Sharding batch{{0, -1}, {}}, partial{{-1, -1}, {0}};
  ShardedExecutor exec(g, mesh, {{a.id, batch}, {b.id, batch}, {sum.id, partial}}, {});
  EXPECT_TRUE(exec.partition().collectives.empty());
  std::vector<Tensor> blocks = {Tensor({3, 5}), Tensor({3, 5})};
  Tensor want({3, 5});
  for (int m = 0; m < 3; ++m) {
    const Tensor am = testing::random_tensor({4, 3}, 50 + m),
                 bm = testing::random_tensor({4, 5}, 60 + m);
    for (int d = 0; d < 2; ++d) {
      exec.bind(d, a.id, block_of(am, batch, mesh, d));
      exec.bind(d, b.id, block_of(bm, batch, mesh, d));
      exec.bind(d, sum.id, blocks[d]);
    }
    exec.run({.step = 1, .lr = 0, .microbatch = m});
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 5; ++j)
        for (int r = 0; r < 4; ++r)
          want.f32()[i * 5 + j] += am.f32()[r * 3 + i] * bm.f32()[r * 5 + j];
  }
  Tensor got({3, 5});
  for (int64_t i = 0; i < got.numel(); ++i) got.f32()[i] = blocks[0].f32()[i] + blocks[1].f32()[i];
  EXPECT_LT(max_relative_error(got, want), 1e-6);
}

// Sums of products (the plain, transposed and permuted output layouts of
// the einsum kernel, chained as q + k + v's gradients are), of a product
// and a scatter (a tied embedding's gradient), one whose earlier operand is
// no product, and two that must not fold: an operand read elsewhere too,
// and a later operand whose kernel cannot add into its output.
struct FoldCase {
  Graph g;
  int a = -1, b = -1, ids = -1, dy = -1, table = -1;
  std::vector<int> sums, firsts, seconds;  // each sum and its operands
  std::vector<bool> folds;                 // whether the sum may fold
  std::vector<int> outputs;                // what the caller reads
};

FoldCase build_folds() {
  FoldCase c;
  Graph& g = c.g;
  const Value a = g.input("a", {2, 4, 3}), b = g.input("b", {2, 4, 5});
  const Value ids = g.input("ids", {4}, DType::I32), dy = g.input("dy", {4, 3});
  const Value table = g.input("table", {7, 3});
  c.a = a.id, c.b = b.id, c.ids = ids.id, c.dy = dy.id, c.table = table.id;
  const Value a0 = ops::reduce_sum(a, {0}), b0 = ops::reduce_sum(b, {0});  // [4, 3], [4, 5]
  const auto sum = [&](Value x, Value y, bool folds) {
    const Value s = x + y;
    c.sums.push_back(s.id), c.firsts.push_back(x.id), c.seconds.push_back(y.id);
    c.folds.push_back(folds);
    return s;
  };
  // Values are made one statement at a time: the operands' order in the
  // graph decides which one adds into the other.
  const auto product = [&] { return ops::einsum("bi,bj->ij", a0, b0); };  // [3, 5]
  const Value plain = product();
  const Value transposed = ops::einsum("bj,bi->ij", b0, a0);
  const Value inner = sum(plain, transposed, true);
  const Value permuted = ops::einsum("hbi,hbj->ij", a, b);
  const Value chain = sum(inner, permuted, true);
  const Value logits = ops::einsum("bi,vi->bv", a0, table);  // [4, 7]
  const Value head = ops::einsum("bv,bc->vc", logits, dy);
  const Value scattered = g.add(Op::ScatterAdd, {ids, dy}, ScatterAddAttrs{{7, 3}, {}});
  const Value embedding = sum(head, scattered, true);
  const Value scaled = ops::scale(b0, 2.0);
  const Value after_scale = sum(scaled, ops::einsum("bi,ij->bj", a0, product()), true);
  const Value shared = product();
  const Value read_twice = sum(shared, product(), false);
  const Value first = product();
  const Value not_a_product = sum(first, ops::scale(product(), 0.5), false);
  c.outputs = {
      chain.id,        embedding.id, after_scale.id, read_twice.id, ops::scale(shared, 3.0).id,
      not_a_product.id};
  return c;
}

std::map<int, Tensor> fold_inputs(const FoldCase& c) {
  return {{c.a, testing::random_tensor({2, 4, 3}, 1)},
          {c.b, testing::random_tensor({2, 4, 5}, 2)},
          {c.ids, testing::random_ids({4}, 7, 3)},
          {c.dy, testing::random_tensor({4, 3}, 4)},
          {c.table, testing::random_tensor({7, 3}, 5)}};
}

TEST(FoldedSums, AddIntoTheEarlierOperandOnlyWhereNothingElseReadsIt) {
  const FoldCase c = build_folds();
  const BufferPlan plan = plan_buffers(c.g, c.outputs);
  for (size_t k = 0; k < c.sums.size(); ++k) {
    const int earlier = std::min(c.firsts[k], c.seconds[k]);
    const int later = std::max(c.firsts[k], c.seconds[k]);
    EXPECT_EQ(plan.sum_view[c.sums[k]], c.folds[k] ? earlier : -1) << "sum " << k;
    EXPECT_EQ(plan.adds_into[later], c.folds[k] ? earlier : -1) << "sum " << k;
    if (c.folds[k]) {
      EXPECT_EQ(plan.slot_of[c.sums[k]], -1) << "a folded sum has no buffer of its own";
      EXPECT_EQ(plan.slot_of[later], -1) << "nor does the operand added into the other";
    }
  }
}

// Each sum against its operands added here: the operands computed in a run
// where every one is an output (so none can fold), the sums in a run where
// they fold; the folded run goes twice, as a step does (nothing may carry
// over from the last run in a reused buffer).
TEST(FoldedSums, GiveTheSumOfTheirOperands) {
  const FoldCase c = build_folds();
  std::vector<int> operands = c.firsts;
  operands.insert(operands.end(), c.seconds.begin(), c.seconds.end());
  Executor unfolded(c.g, operands);
  for (const auto& [id, t] : fold_inputs(c)) unfolded.bind(id, t);
  unfolded.run();
  Executor folded(c.g, c.outputs);
  for (const auto& [id, t] : fold_inputs(c)) folded.bind(id, t);
  for (int run = 0; run < 2; ++run) {
    folded.run();
    for (size_t k = 0; k < c.sums.size(); ++k) {
      Tensor want = unfolded.value(c.firsts[k]).clone();
      const Tensor& second = unfolded.value(c.seconds[k]);
      for (int64_t i = 0; i < want.numel(); ++i) want.f32()[i] += second.f32()[i];
      // The chain's inner sum shares its buffer with the outer one, which
      // then holds (plain + transposed) + permuted: checked as sum 1.
      if (k == 0) continue;
      EXPECT_LT(max_relative_error(folded.value(c.sums[k]), want), 1e-6) << "sum " << k;
    }
  }
}

}  // namespace
}  // namespace autoshard
