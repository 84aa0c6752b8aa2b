// Every primitive, sharded every way it may be, against one device: for each
// op, every strategy its loops allow on a 2x3 mesh (the planner's choices),
// and random input layouts through its sharding rule (the partitioner's
// propagation), must give the single-device result. Sizes are awkward on
// purpose (5, 7: uneven on both axes). A new op without a case here fails.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "autoshard/ir/ops.h"
#include "autoshard/runtime/sharded_executor.h"
#include "ir/loop_nest.h"
#include "ir/op_def.h"
#include "test_util.h"

namespace autoshard {
namespace {

struct Leaf {
  enum class Kind { Normal, Positive, Ids };
  Shape shape;
  Kind kind = Kind::Normal;
  int32_t limit = 0;  // ids: values in [0, limit)
};

struct OpCase {
  Op op;
  std::vector<Leaf> leaves;
  std::function<Value(Graph&, const std::vector<Value>&)> build;
};

using K = Leaf::Kind;

std::vector<OpCase> cases() {
  auto unary = [](Op op) {
    return OpCase{op, {{{5, 7}}}, [op](Graph& g, const std::vector<Value>& x) {
                    OpAttrs a = NoAttrs{};
                    if (op == Op::Gelu) a = GeluAttrs{true};
                    return g.add(op, {x[0]}, a);
                  }};
  };
  auto binary = [](Op op, Shape b) {
    return OpCase{op,
                  {{{5, 7}}, {b, op == Op::Div ? K::Positive : K::Normal}},
                  [op](Graph& g, const std::vector<Value>& x) {
                    OpAttrs a = NoAttrs{};
                    if (op == Op::GeluGrad) a = GeluAttrs{false};
                    return g.add(op, {x[0], x[1]}, a);
                  }};
  };
  const Shape rows{5, 3};
  // Convolutions and pooling: odd images, stride 2 with 'same' padding (one
  // more zero after), groups, depthwise, a dilated 1-D kernel. A split of
  // the output rows over 3 devices gives uneven bands and needs halos.
  auto conv2d = [](int64_t stride, Shape x, Shape k, int64_t groups = 1, int64_t dilation = 1) {
    ConvAttrs a;
    a.groups = groups;
    for (size_t i = 0; i + 2 < x.size(); ++i) {
      auto [lo, hi] = ops::same_padding(x[1 + i], k[i], stride, dilation);
      a.strides.push_back(stride);
      a.dilations.push_back(dilation);
      a.pad_lo.push_back(lo);
      a.pad_hi.push_back(hi);
    }
    return a;
  };
  const ConvAttrs c2 = conv2d(2, {4, 7, 5, 3}, {3, 3});          // -> [4, 4, 3, 5]
  const ConvAttrs grouped = conv2d(1, {2, 5, 4, 6}, {3, 2}, 2);  // -> [2, 5, 4, 4]
  const ConvAttrs depthwise = conv2d(1, {4, 9, 3}, {3}, 3, 2);   // -> [4, 9, 6]
  auto with_shape = [](ConvAttrs a, Shape s) {
    a.shape = std::move(s);
    return a;
  };
  auto pool2d = [](bool max, int64_t window, int64_t stride, Shape x, bool same) {
    PoolAttrs a{max, {}, {}, {}, {}};
    for (size_t i = 0; i + 2 < x.size(); ++i) {
      auto [lo, hi] = same ? ops::same_padding(x[1 + i], window, stride) : std::pair{0L, 0L};
      a.window.push_back(window);
      a.strides.push_back(stride);
      a.pad_lo.push_back(lo);
      a.pad_hi.push_back(hi);
    }
    return a;
  };
  const PoolAttrs max_same = pool2d(true, 3, 2, {4, 7, 5, 3}, true);   // -> [4, 4, 3, 3]
  const PoolAttrs avg_same = pool2d(false, 2, 2, {4, 7, 5, 3}, true);  // -> [4, 4, 3, 3]
  const PoolAttrs avg_1d = pool2d(false, 3, 2, {4, 9, 3}, false);      // -> [4, 4, 3]
  auto unary_fn = [](UnaryFn fn, double alpha, K kind = K::Normal) {
    return OpCase{Op::Unary, {{{5, 7}, kind}}, [fn, alpha](Graph&, const std::vector<Value>& x) {
                    return ops::unary(x[0], fn, alpha);
                  }};
  };
  return {
      {Op::Conv,
       {{{4, 7, 5, 3}}, {{3, 3, 3, 5}}},
       [c2](Graph&, auto& x) { return ops::conv(x[0], x[1], c2); }},
      {Op::Conv,
       {{{2, 5, 4, 6}}, {{3, 2, 3, 4}}},
       [grouped](Graph&, auto& x) { return ops::conv(x[0], x[1], grouped); }},
      {Op::Conv,
       {{{4, 9, 3}}, {{3, 1, 6}}},
       [depthwise](Graph&, auto& x) { return ops::conv(x[0], x[1], depthwise); }},
      {Op::ConvGradInput,
       {{{4, 4, 3, 5}}, {{3, 3, 3, 5}}},
       [=](Graph&, auto& x) {
         return ops::conv_grad_input(x[0], x[1], with_shape(c2, {4, 7, 5, 3}));
       }},
      {Op::ConvGradInput,
       {{{2, 5, 4, 4}}, {{3, 2, 3, 4}}},
       [=](Graph&, auto& x) {
         return ops::conv_grad_input(x[0], x[1], with_shape(grouped, {2, 5, 4, 6}));
       }},
      {Op::ConvGradInput,
       {{{4, 9, 6}}, {{3, 1, 6}}},
       [=](Graph&, auto& x) {
         return ops::conv_grad_input(x[0], x[1], with_shape(depthwise, {4, 9, 3}));
       }},
      {Op::ConvGradFilter,
       {{{4, 7, 5, 3}}, {{4, 4, 3, 5}}},
       [=](Graph& g, auto& x) {
         return g.add(Op::ConvGradFilter, {x[0], x[1]}, with_shape(c2, {3, 3, 3, 5}));
       }},
      {Op::ConvGradFilter,
       {{{2, 5, 4, 6}}, {{2, 5, 4, 4}}},
       [=](Graph& g, auto& x) {
         return g.add(Op::ConvGradFilter, {x[0], x[1]}, with_shape(grouped, {3, 2, 3, 4}));
       }},
      {Op::ConvGradFilter,
       {{{4, 9, 3}}, {{4, 9, 6}}},
       [=](Graph& g, auto& x) {
         return g.add(Op::ConvGradFilter, {x[0], x[1]}, with_shape(depthwise, {3, 1, 6}));
       }},
      {Op::Pool,
       {{{4, 7, 5, 3}}},
       [max_same](Graph&, auto& x) { return ops::pool(x[0], max_same); }},
      {Op::Pool,
       {{{4, 7, 5, 3}}},
       [avg_same](Graph&, auto& x) { return ops::pool(x[0], avg_same); }},
      {Op::Pool, {{{4, 9, 3}}}, [avg_1d](Graph&, auto& x) { return ops::pool(x[0], avg_1d); }},
      {Op::PoolGrad,
       {{{4, 7, 5, 3}}, {{4, 4, 3, 3}}},
       [max_same](Graph& g, auto& x) {
         return g.add(Op::PoolGrad, {x[0], x[1]}, max_same);
       }},
      {Op::PoolGrad,
       {{{4, 7, 5, 3}}, {{4, 4, 3, 3}}},
       [avg_same](Graph& g, auto& x) {
         return g.add(Op::PoolGrad, {x[0], x[1]}, avg_same);
       }},
      unary_fn(UnaryFn::Sigmoid, 0),
      unary_fn(UnaryFn::Elu, 1.0),
      unary_fn(UnaryFn::Mish, 0),
      unary_fn(UnaryFn::Log, 0, K::Positive),
      {Op::UnaryGrad,
       {{{5, 7}}, {{5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::UnaryGrad, {x[0], x[1]}, UnaryAttrs{UnaryFn::LeakyRelu, 0.2});
       }},
      {Op::Pad,
       {{{4, 5, 3}}},
       [](Graph&, auto& x) {
         return ops::pad(x[0], {0, 2, 0}, {0, 1, -1});
       }},
      {Op::Concat,  // three runs of uneven lengths along the middle axis
       {{{5, 2, 7}}, {{5, 3, 7}}, {{5, 1, 7}}},
       [](Graph&, auto& x) {
         return ops::concat({x[0], x[1], x[2]}, 1);
       }},
      {Op::Concat,  // along the first axis (the stacked steps of a sequence)
       {{{2, 7}}, {{3, 7}}},
       [](Graph&, auto& x) {
         return ops::concat({x[0], x[1]}, 0);
       }},
      {Op::Concat,  // 40 steps: more inputs than the bits of an op's input masks
       std::vector<Leaf>(40, Leaf{{1, 5}}), [](Graph&, auto& x) { return ops::concat(x, 0); }},
      {Op::Resize,
       {{{4, 5, 7, 3}}},
       [](Graph&, auto& x) { return ops::resize(x[0], 1, 8, false); }},
      {Op::Resize, {{{4, 5, 7, 3}}}, [](Graph&, auto& x) { return ops::resize(x[0], 2, 3, true); }},
      {Op::Resize,  // the adjoint (the gradient): back to 5 rows
       {{{4, 8, 7, 3}}},
       [](Graph& g, auto& x) {
         return g.add(Op::Resize, {x[0]}, ResizeAttrs{1, 5, false, true});
       }},
      {Op::Constant,
       {},
       [](Graph& g, auto&) {
         return ops::constant(g, {5, 7}, 2.5);
       }},
      {Op::Iota,
       {},
       [](Graph& g, auto&) {
         return ops::iota(g, {5, 7});
       }},
      {Op::Einsum,
       {{{5, 3, 7}}, {{7, 3, 2}}},
       [](Graph&, auto& x) { return ops::einsum("btc,chd->bthd", x[0], x[1]); }},
      {Op::QuantizedEinsum,  // no compact copy bound: the f32 values, as a resharded block
       {{{5, 3, 7}}, {{7, 3, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::QuantizedEinsum, {x[0], x[1]},
                      EinsumAttrs{"btc", "chd", "bthd", 1, WeightsDType::Int8});
       }},
      binary(Op::Add, {7}),
      binary(Op::Sub, {5, 1}),
      binary(Op::Mul, {5, 7}),
      binary(Op::Div, {7}),
      {Op::Scale, {{{5, 7}}}, [](Graph&, auto& x) { return ops::scale(x[0], -1.5); }},
      unary(Op::Gelu),
      binary(Op::GeluGrad, {5, 7}),
      unary(Op::Relu),
      binary(Op::ReluGrad, {5, 7}),
      unary(Op::Tanh),
      binary(Op::TanhGrad, {5, 7}),
      {Op::ReduceSum,
       {{{5, 3, 7}}},
       [](Graph&, auto& x) {
         return ops::reduce_sum(x[0], {0, 2});
       }},
      {Op::BroadcastTo,
       {{{3, 1}}},
       [](Graph&, auto& x) {
         return ops::broadcast_to(x[0], {5, 3, 7});
       }},
      {Op::Softmax, {{{5, 3, 3}}}, [](Graph&, auto& x) { return ops::softmax(x[0], true); }},
      binary(Op::SoftmaxGrad, {5, 7}),
      {Op::Attention,
       {{{4, 5, 6, 3}}, {{4, 7, 6, 3}}, {{4, 7, 6, 2}}},
       [](Graph&, auto& x) { return ops::attention(x[0], x[1], x[2], true, 0.5); }},
      {Op::AttentionGrad,
       {{{4, 5, 6, 3}}, {{4, 7, 6, 3}}, {{4, 7, 6, 2}}, {{4, 5, 6, 2}}, {{4, 5, 6, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                      AttentionAttrs{true, 0.5, 1});
       }},
      {Op::Attention,  // grouped queries: 2 kv heads, 3 queries each
       {{{4, 5, 2, 3, 3}}, {{4, 7, 2, 3}}, {{4, 7, 2, 2}}},
       [](Graph&, auto& x) { return ops::attention(x[0], x[1], x[2], true, 0.5); }},
      {Op::AttentionGrad,  // dv of grouped queries: a split group leaves partial sums
       {{{4, 5, 2, 3, 3}}, {{4, 7, 2, 3}}, {{4, 7, 2, 2}}, {{4, 5, 2, 3, 2}}, {{4, 5, 2, 3, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                      AttentionAttrs{false, 0.5, 2});
       }},
      {Op::AttentionGrad,  // dk of a group of 2 split 3 ways: one device has no queries
       {{{4, 5, 2, 2, 3}}, {{4, 7, 2, 3}}, {{4, 7, 2, 2}}, {{4, 5, 2, 2, 2}}, {{4, 5, 2, 2, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                      AttentionAttrs{false, 0.5, 1});
       }},
      {Op::Attention,  // a sliding window of 3 keys
       {{{4, 5, 6, 3}}, {{4, 7, 6, 3}}, {{4, 7, 6, 2}}},
       [](Graph&, auto& x) { return ops::attention(x[0], x[1], x[2], true, 0.5, 3); }},
      {Op::AttentionGrad,
       {{{4, 5, 6, 3}}, {{4, 7, 6, 3}}, {{4, 7, 6, 2}}, {{4, 5, 6, 2}}, {{4, 5, 6, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                      AttentionAttrs{true, 0.5, 1, 3});
       }},
      // dq, dk and dv in one pass, stacked (and padded: more keys than queries,
      // dv narrower than dk), computing the statistics or reading them.
      {Op::AttentionGrad,
       {{{4, 5, 6, 3}}, {{4, 7, 6, 3}}, {{4, 7, 6, 2}}, {{4, 5, 6, 2}}, {{4, 5, 6, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                      AttentionAttrs{true, 0.5, 4});
       }},
      {Op::AttentionGrad,  // grouped queries: dk and dv per query head, never partial
       {{{4, 5, 2, 3, 3}}, {{4, 7, 2, 3}}, {{4, 7, 2, 2}}, {{4, 5, 2, 3, 2}}, {{4, 5, 2, 3, 2}}},
       [](Graph& g, auto& x) {
         Value stats = g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                             AttentionAttrs{false, 0.5, 3});
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4], stats},
                      AttentionAttrs{false, 0.5, 4});
       }},
      {Op::AttentionGrad,  // a group of 2 split 3 ways, a sliding window of 3 keys
       {{{4, 5, 2, 2, 3}}, {{4, 7, 2, 3}}, {{4, 7, 2, 2}}, {{4, 5, 2, 2, 2}}, {{4, 5, 2, 2, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::AttentionGrad, {x[0], x[1], x[2], x[3], x[4]},
                      AttentionAttrs{true, 0.5, 4, 3});
       }},
      {Op::Attention,  // queries at positions among the keys (generation)
       {{{4, 5, 6, 3}}, {{4, 7, 6, 3}}, {{4, 7, 6, 2}}, {{5}, K::Ids, 7}},
       [](Graph&, auto& x) { return ops::attention(x[0], x[1], x[2], x[3], 0.5); }},
      {Op::CacheWrite,
       {{{4, 7, 6, 3}}, {{4, 2, 6, 3}}, {{2}, K::Ids, 7}},
       [](Graph&, auto& x) { return ops::cache_write(x[0], x[1], x[2]); }},
      {Op::Rotary,
       {{{4, 5, 3, 6}}, {{5}, K::Ids, 40}},
       [](Graph&, auto& x) { return ops::rotary(x[0], x[1], RotaryAttrs{.theta = 50.0}); }},
      {Op::LstmCell,
       {{{5, 4, 7}}, {{5, 4, 7}}, {{2, 5, 7}}},
       [](Graph&, auto& x) { return ops::lstm_cell(x[0], x[1], x[2]); }},
      {Op::LstmCell,  // a mask of any value: state + m (next - state)
       {{{5, 4, 7}}, {{5, 4, 7}}, {{2, 5, 7}}, {{5, 1}}},
       [](Graph&, auto& x) { return ops::lstm_cell(x[0], x[1], x[2], x[3]); }},
      {Op::LstmCellGrad,
       {{{5, 4, 7}}, {{5, 4, 7}}, {{2, 5, 7}}, {{5, 1}}, {{2, 5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::LstmCellGrad, {x[0], x[1], x[2], x[3], x[4]});
       }},
      {Op::LstmCellStateGrad,
       {{{5, 4, 7}}, {{5, 4, 7}}, {{2, 5, 7}}, {{2, 5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::LstmCellStateGrad, {x[0], x[1], x[2], x[3]});
       }},
      {Op::GruCell,
       {{{5, 3, 7}}, {{5, 3, 7}}, {{5, 7}}},
       [](Graph&, auto& x) { return ops::gru_cell(x[0], x[1], x[2]); }},
      {Op::GruCell,  // a mask of any value: h + m (next - h)
       {{{5, 3, 7}}, {{5, 3, 7}}, {{5, 7}}, {{5, 1}}},
       [](Graph&, auto& x) { return ops::gru_cell(x[0], x[1], x[2], x[3]); }},
      {Op::GruCellGradX,
       {{{5, 3, 7}}, {{5, 3, 7}}, {{5, 7}}, {{5, 1}}, {{5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::GruCellGradX, {x[0], x[1], x[2], x[3], x[4]});
       }},
      {Op::GruCellGradR,
       {{{5, 3, 7}}, {{5, 3, 7}}, {{5, 7}}, {{5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::GruCellGradR, {x[0], x[1], x[2], x[3]});
       }},
      {Op::GruCellGradH,
       {{{5, 3, 7}}, {{5, 3, 7}}, {{5, 7}}, {{5, 1}}, {{5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::GruCellGradH, {x[0], x[1], x[2], x[3], x[4]});
       }},
      unary(Op::Silu),
      binary(Op::SiluGrad, {5, 7}),
      {Op::Normalize, {{{5, 7}}}, [](Graph&, auto& x) { return ops::normalize(x[0], 1e-5); }},
      {Op::Normalize,
       {{{5, 7}}},
       [](Graph&, auto& x) { return ops::normalize(x[0], 1e-5, false); }},
      {Op::NormalizeGrad,
       {{{5, 7}}, {{5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::NormalizeGrad, {x[0], x[1]}, EpsilonAttrs{1e-5});
       }},
      {Op::RowMax, {{{5, 3, 7}}}, [](Graph& g, auto& x) { return g.add(Op::RowMax, {x[0]}); }},
      {Op::CrossEntropyStats,
       {{{5, 3, 7}}, {rows, K::Ids, 7}, {rows}},
       [](Graph& g, auto& x) {
         return g.add(Op::CrossEntropyStats, {x[0], x[1], x[2]}, ClassShardAttrs{});
       }},
      {Op::CrossEntropyFinish,
       {{{5, 3, 2}, K::Positive}, {rows}},
       [](Graph& g, auto& x) {
         return g.add(Op::CrossEntropyFinish, {x[0], x[1]});
       }},
      {Op::CrossEntropyFinishGrad,
       {{{5, 3, 2}, K::Positive}, {rows}},
       [](Graph& g, auto& x) {
         return g.add(Op::CrossEntropyFinishGrad, {x[0], x[1]});
       }},
      {Op::CrossEntropyStatsGrad,
       {{{5, 3, 7}}, {rows, K::Ids, 7}, {rows}, {{5, 3, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::CrossEntropyStatsGrad, {x[0], x[1], x[2], x[3]}, ClassShardAttrs{});
       }},
      {Op::Gather,
       {{{7, 3}}, {rows, K::Ids, 7}},
       [](Graph&, auto& x) { return ops::gather(x[0], x[1]); }},
      {Op::ScatterAdd,
       {{rows, K::Ids, 7}, {{5, 3, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::ScatterAdd, {x[0], x[1]}, ScatterAddAttrs{{7, 2}, {}});
       }},
      {Op::Gather,  // ids offset by 2 (OPT's learned positions): rows 2 .. 8
       {{{9, 3}}, {rows, K::Ids, 7}},
       [](Graph&, auto& x) { return ops::gather(x[0], x[1], 2); }},
      {Op::ScatterAdd,
       {{rows, K::Ids, 7}, {{5, 3, 2}}},
       [](Graph& g, auto& x) {
         return g.add(Op::ScatterAdd, {x[0], x[1]}, ScatterAddAttrs{{9, 2}, {}, 2});
       }},
      {Op::Reshape,
       {{{5, 3, 7}}},
       [](Graph&, auto& x) {
         return ops::reshape(x[0], {5, 21});
       }},
      {Op::Transpose,
       {{{5, 3, 7}}},
       [](Graph&, auto& x) {
         return ops::transpose(x[0], {2, 0, 1});
       }},
      {Op::Dropout, {{{5, 7}}}, [](Graph&, auto& x) { return ops::dropout(x[0], 0.4, 9); }},
      {Op::SumSquares, {{{5, 7}}}, [](Graph& g, auto& x) { return g.add(Op::SumSquares, {x[0]}); }},
      {Op::ClipScale,
       {{{}, K::Positive}},
       [](Graph& g, auto& x) { return g.add(Op::ClipScale, {x[0]}, ClipAttrs{0.5}); }},
      {Op::AdamUpdate,
       {{{5, 7}}, {{5, 7}}, {{5, 7}}, {{5, 7}, K::Positive}, {{}, K::Positive}},
       [](Graph& g, auto& x) {
         return g.add(Op::AdamUpdate, {x[0], x[1], x[2], x[3], x[4]},
                      AdamAttrs{0.9, 0.95, 1e-3, 0.1, true, false});
       }},
      {Op::SgdUpdate,
       {{{5, 7}}, {{5, 7}}, {{5, 7}}, {{}, K::Positive}},
       [](Graph& g, auto& x) {
         return g.add(Op::SgdUpdate, {x[0], x[1], x[2], x[3]}, SgdAttrs{0.9, 0.01, true});
       }},
      {Op::Accumulate,  // a step's first micro-batch: the sum becomes the value
       {{{5, 7}}, {{5, 7}}},
       [](Graph& g, auto& x) {
         return g.add(Op::Accumulate, {x[0], x[1]});
       }},
  };
}

Tensor leaf_data(const Leaf& l, uint64_t seed) {
  if (l.kind == K::Ids) return testing::random_ids(l.shape, l.limit, seed);
  Tensor t = testing::random_tensor(l.shape, seed);
  if (l.kind == K::Positive)
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = 1.0f + std::fabs(t.f32()[i]);
  return t;
}

struct Built {
  Graph graph;
  int op = -1;
  std::vector<int> leaves;  // node ids
  std::vector<Tensor> data;
  bool updates = false;  // the op writes its inputs; compare those
};

Built build(const OpCase& c) {
  Built b;
  std::vector<Value> xs;
  for (size_t k = 0; k < c.leaves.size(); ++k) {
    const Leaf& l = c.leaves[k];
    std::string name = "x";
    name += std::to_string(k);
    Value v = l.kind == K::Ids ? b.graph.input(name, l.shape, DType::I32)
                               : b.graph.parameter(name, l.shape);
    xs.push_back(v);
    b.leaves.push_back(v.id);
    b.data.push_back(leaf_data(l, 10 + k));
  }
  b.op = c.build(b.graph, xs).id;
  b.updates = op_def(c.op).side_effect;
  return b;
}

// The op's result, or the state it updates, on one device.
std::vector<Tensor> run_one(const Built& b) {
  std::vector<Tensor> state;
  for (const Tensor& t : b.data) state.push_back(t.clone());
  Executor exec(b.graph, b.updates ? std::vector<int>{} : std::vector<int>{b.op});
  for (size_t k = 0; k < b.leaves.size(); ++k) exec.bind(b.leaves[k], state[k]);
  exec.run({1, 0.1});
  if (b.updates) return state;
  return {exec.value(b.op).clone()};
}

std::vector<Tensor> run_sharded(const Built& b, const DeviceMesh& mesh, const PartitionRequest& r) {
  ShardedExecutor exec(b.graph, mesh, r, b.updates ? std::vector<int>{} : std::vector<int>{b.op});
  std::vector<std::vector<Tensor>> blocks(b.leaves.size());
  for (size_t k = 0; k < b.leaves.size(); ++k)
    for (int d = 0; d < mesh.size(); ++d) {
      blocks[k].push_back(block_of(b.data[k], exec.layout(b.leaves[k]), mesh, d));
      exec.bind(d, b.leaves[k], blocks[k].back());
    }
  exec.run({1, 0.1});
  if (!b.updates) return {exec.output(0).clone()};
  std::vector<Tensor> state;
  for (size_t k = 0; k < b.leaves.size(); ++k) {
    Tensor whole(b.data[k].shape(), b.data[k].dtype());
    for (int d = 0; d < mesh.size(); ++d)
      write_block(whole, blocks[k][d], exec.layout(b.leaves[k]), mesh, d);
    state.push_back(whole);
  }
  return state;
}

void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want,
                 const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size(); ++k) {
    ASSERT_EQ(got[k].shape(), want[k].shape()) << what;
    if (want[k].dtype() == DType::I32) {
      for (int64_t i = 0; i < want[k].numel(); ++i)
        ASSERT_EQ(got[k].i32()[i], want[k].i32()[i]) << what;
      continue;
    }
    EXPECT_LT(max_relative_error(got[k], want[k]), 1e-5) << what << " value " << k;
  }
}

const DeviceMesh kMesh({2, 3}, {"a", "b"});

TEST(OpSharding, EveryOpHasACase) {
  std::set<Op> covered;
  for (const OpCase& c : cases()) covered.insert(c.op);
  for (int i = 0; i < static_cast<int>(Op::kCount); ++i) {
    const Op op = static_cast<Op>(i);
    if (op == Op::Parameter || op == Op::Input || op_def(op).local_only) continue;
    EXPECT_TRUE(covered.count(op)) << op_name(op) << " has no case in op_sharding_test.cc";
  }
}

TEST(OpSharding, EveryStrategyOfEveryOpMatchesOneDevice) {
  for (const OpCase& c : cases()) {
    const Built b = build(c);
    const std::vector<Tensor> want = run_one(b);
    const Node& n = b.graph.node(b.op);
    const LoopNest nest = op_def(n.op).loops(b.graph, n);
    const std::vector<LoopSplit> splits = enumerate_splits(nest, kMesh);
    EXPECT_GE(splits.size(), 1u);
    for (const LoopSplit& split : splits) {
      PartitionRequest r;
      r.decisions[b.op] = decide(nest, split);
      std::string what =
          std::string(op_name(c.op)) + " strategy " + r.decisions[b.op].output.to_string(kMesh);
      for (const Sharding& s : r.decisions[b.op].inputs) what += " " + s.to_string(kMesh);
      expect_same(run_sharded(b, kMesh, r), want, what);
    }
  }
}

// Linear ops also run on partial sums (the planner's way of combining them
// once, after the op): each input is made by a sum over a leading dimension,
// split over the mesh axis where the strategy wants that input partial and
// whole elsewhere, then every strategy of the op with partial inputs runs
// on it (add: all inputs partial; mul: either one; div: the numerator).
TEST(OpSharding, LinearOpsRunOnPartialSums) {
  int tested = 0;
  std::set<std::pair<Op, int>> carriers_seen;  // (op, first input carrying partial sums)
  for (const OpCase& c : cases()) {
    const Linearity linearity = op_def(c.op).linearity;
    if (linearity == Linearity::None) continue;
    Built b;
    std::vector<Value> xs;
    std::vector<int> sums;
    for (size_t k = 0; k < c.leaves.size(); ++k) {
      std::string name = "y";
      name += std::to_string(k);
      if (c.leaves[k].kind == K::Ids) {  // integers: never partial sums, an input as it is
        xs.push_back(b.graph.input(name, c.leaves[k].shape, DType::I32));
        b.leaves.push_back(xs.back().id);
        b.data.push_back(leaf_data(c.leaves[k], 30 + k));
        sums.push_back(-1);
        continue;
      }
      Shape shape{4};
      shape.insert(shape.end(), c.leaves[k].shape.begin(), c.leaves[k].shape.end());
      Value y = b.graph.parameter(name, shape);
      b.leaves.push_back(y.id);
      b.data.push_back(testing::random_tensor(shape, 30 + k));
      xs.push_back(ops::reduce_sum(y, {0}));
      sums.push_back(xs.back().id);
    }
    b.op = c.build(b.graph, xs).id;
    const std::vector<Tensor> want = run_one(b);
    const Node& n = b.graph.node(b.op);
    for (const ShardDecision& d :
         enumerate_strategies(op_def(n.op).loops(b.graph, n), kMesh, linearity)) {
      int first = -1;
      for (size_t k = 0; k < d.inputs.size() && first < 0; ++k)
        if (!d.inputs[k].partial.empty()) first = int(k);
      if (first < 0) continue;
      ASSERT_TRUE(takes_partial(linearity, d.inputs, d.output));
      carriers_seen.insert({c.op, first});
      PartitionRequest r;
      r.decisions[b.op] = d;
      std::string what = op_name(c.op);
      what += " on partial sums, ";
      for (size_t k = 0; k < sums.size(); ++k) {
        if (sums[k] < 0) {
          r.leaves[b.leaves[k]] = d.inputs[k];
          continue;
        }
        const bool partial = !d.inputs[k].partial.empty();
        Sharding y{{partial ? d.inputs[k].partial[0] : -1}, {}};
        y.dims.insert(y.dims.end(), d.inputs[k].dims.begin(), d.inputs[k].dims.end());
        r.decisions[sums[k]] = {{y}, d.inputs[k]};
        what += d.inputs[k].to_string(kMesh) + ", ";
      }
      what += "to " + d.output.to_string(kMesh);
      expect_same(run_sharded(b, kMesh, r), want, what);
      ++tested;
    }
  }
  EXPECT_GT(tested, 20);
  EXPECT_TRUE(carriers_seen.count({Op::Mul, 1})) << "mul takes partial sums in either input";
  EXPECT_FALSE(carriers_seen.count({Op::Div, 1})) << "div only in its numerator";
  EXPECT_TRUE(carriers_seen.count({Op::ScatterAdd, 1})) << "scatter_add in the values it adds";
}

// A decision that puts partial sums where the op is not linear in them is
// refused by name, not run into wrong numbers.
TEST(OpSharding, PartialSumsWhereTheOpIsNotLinearAreRefused) {
  const Sharding whole{{-1}, {}}, partial{{-1}, {0}};
  EXPECT_TRUE(takes_partial(Linearity::Product, {whole, partial}, partial));
  EXPECT_FALSE(takes_partial(Linearity::Product, {partial, partial}, partial));
  EXPECT_FALSE(takes_partial(Linearity::Sum, {whole, partial}, partial));
  EXPECT_FALSE(takes_partial(Linearity::Numerator, {whole, partial}, partial));
  EXPECT_FALSE(takes_partial(Linearity::Second, {partial, whole}, partial));
  EXPECT_TRUE(takes_partial(Linearity::Second, {whole, partial}, partial));
  EXPECT_FALSE(takes_partial(Linearity::None, {partial}, partial));
  EXPECT_FALSE(takes_partial(Linearity::Unary, {partial}, whole));
}

// Each mesh axis on a random dimension or none; axes that meet on one
// dimension split it together (a tuple).
Sharding random_layout(const Shape& shape, std::mt19937& rng) {
  std::vector<std::vector<int>> members(shape.size());
  for (int a = 0; a < kMesh.rank(); ++a) {
    const size_t d = rng() % (shape.size() + 1);
    if (d < shape.size()) members[d].push_back(a);
  }
  Sharding s = Sharding::replicated(static_cast<int>(shape.size()));
  for (size_t d = 0; d < shape.size(); ++d)
    if (!members[d].empty()) s.dims[d] = tuple_axis(members[d]);
  return s;
}

TEST(OpSharding, EveryRuleOnRandomInputLayoutsMatchesOneDevice) {
  std::mt19937 rng(5);
  for (const OpCase& c : cases()) {
    const Built b = build(c);
    const std::vector<Tensor> want = run_one(b);
    for (int trial = 0; trial < 8; ++trial) {
      PartitionRequest r;
      std::string what = std::string(op_name(c.op)) + " inputs";
      for (size_t k = 0; k < b.leaves.size(); ++k) {
        r.leaves[b.leaves[k]] = random_layout(c.leaves[k].shape, rng);
        what += " " + r.leaves[b.leaves[k]].to_string(kMesh);
      }
      expect_same(run_sharded(b, kMesh, r), want, what);
    }
  }
}

// Spatial splits beyond one neighbour: 5 output rows over 4 devices (bands
// of 2, 1, 1, 1), a kernel of 5 rows whose halo reaches two devices away,
// and 3 rows over 4 devices (one device holds none), each against one device.
TEST(OpSharding, ConvolutionHalosReachPastTheNextDevice) {
  const DeviceMesh rows({4}, {"rows"});
  for (int64_t height : {5, 3}) {
    Built b;
    Value x = b.graph.parameter("x", {2, height, 4, 3});
    Value w = b.graph.parameter("w", {5, 3, 3, 2});
    b.leaves = {x.id, w.id};
    b.data = {testing::random_tensor({2, height, 4, 3}, 1),
              testing::random_tensor({5, 3, 3, 2}, 2)};
    ConvAttrs a{
        .strides = {1, 1}, .dilations = {1, 1}, .pad_lo = {2, 1}, .pad_hi = {2, 1}, .shape = {}};
    Value y = ops::conv(x, w, a);
    b.op = ops::pool(y, PoolAttrs{true, {3, 2}, {1, 1}, {1, 0}, {1, 1}}).id;
    const std::vector<Tensor> want = run_one(b);
    PartitionRequest r;
    r.leaves[x.id] = Sharding{{-1, 0, -1, -1}, {}};
    expect_same(run_sharded(b, rows, r), want, "conv and pool on rows split 4 ways");
  }
}

}  // namespace
}  // namespace autoshard
