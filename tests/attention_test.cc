// The fused attention op against its plain reference, the unfused graph
// (einsum, scale, softmax, einsum): values and the gradients of q, k and v,
// causal or not, with sizes that are no multiple of the tiles, more keys
// than queries (the causal offset), and a value width other than the key's.
#include <gtest/gtest.h>

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "tensor/tile_gemm.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::evaluate;
using testing::random_tensor;

struct Case {
  int64_t b, t, s, h, dk, dv;
  bool causal;
  int64_t window = 0;  // sliding window (causal): the unfused graph adds a mask
};

// 0 where query i sees key j (the last `window` keys up to i + s - t), else
// a large negative number.
Tensor window_mask(const Case& c) {
  Tensor m({c.t, c.s});
  for (int64_t i = 0; i < c.t; ++i)
    for (int64_t j = 0; j < c.s; ++j) {
      const int64_t last = i + (c.s - c.t);
      m.f32()[i * c.s + j] = j <= last && j > last - c.window ? 0.0f : -1e30f;
    }
  return m;
}

// Loss = sum(attention * w); returns (output, dq, dk, dv).
std::vector<Tensor> run(const Case& c, bool fused) {
  Graph g;
  Value q = g.parameter("q", {c.b, c.t, c.h, c.dk});
  Value k = g.parameter("k", {c.b, c.s, c.h, c.dk});
  Value v = g.parameter("v", {c.b, c.s, c.h, c.dv});
  Value w = g.parameter("w", {c.b, c.t, c.h, c.dv});
  const double scale = 1.0 / std::sqrt(double(c.dk));
  Value out;
  std::map<std::string, Tensor> leaves;
  if (fused) {
    out = ops::attention(q, k, v, c.causal, scale, c.window);
  } else if (c.window > 0) {
    Value mask = g.parameter("mask", {c.t, c.s});
    leaves["mask"] = window_mask(c);
    Value scores = ops::scale(ops::einsum("bqhd,bkhd->bhqk", q, k), scale);
    out = ops::einsum("bhqk,bkhd->bqhd", ops::softmax(scores + mask), v);
  } else {
    Value probs = ops::softmax(ops::scale(ops::einsum("bqhd,bkhd->bhqk", q, k), scale), c.causal);
    out = ops::einsum("bhqk,bkhd->bqhd", probs, v);
  }
  Value loss = ops::reduce_sum(out * w, {0, 1, 2, 3});
  std::vector<Value> grads = gradients(loss, {q, k, v});
  leaves["q"] = random_tensor(q.shape(), 1, 1.5f);
  leaves["k"] = random_tensor(k.shape(), 2, 1.5f);
  leaves["v"] = random_tensor(v.shape(), 3);
  leaves["w"] = random_tensor(w.shape(), 4);
  return evaluate(g, leaves, {out.id, grads[0].id, grads[1].id, grads[2].id});
}

TEST(Attention, FusedMatchesTheUnfusedGraph) {
  const Case cases[] = {
      {2, 5, 5, 3, 4, 4, true},      // smaller than a tile
      {1, 70, 70, 2, 16, 16, true},  // queries and keys span several tiles
      {2, 37, 37, 3, 24, 8, false},  // not causal, value width != key width
      {1, 33, 130, 2, 8, 12, true},  // more keys than queries: query i sees i + 97 keys
      {3, 64, 64, 1, 64, 64, true},  // exactly a tile
      // Sliding windows: narrower than a tile, across tiles, with a key offset.
      {1, 70, 70, 2, 16, 16, true, 5},
      {2, 40, 40, 3, 8, 8, true, 33},
      {1, 33, 130, 2, 8, 12, true, 70},
  };
  for (const Case& c : cases) {
    const std::vector<Tensor> fused = run(c, true), plain = run(c, false);
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i)
      EXPECT_LT(max_relative_error(fused[i], plain[i]), 1e-5)
          << what[i] << " for b" << c.b << " t" << c.t << " s" << c.s << " h" << c.h << " dk"
          << c.dk << " dv" << c.dv << (c.causal ? " causal" : "");
  }
}

// Grouped-query attention (q [b, t, kv, g, d]) against the unfused graph
// over the same five-dim q: every query head of a group reads its kv head.
TEST(Attention, GroupedQueriesMatchTheUnfusedGraph) {
  for (bool causal : {true, false}) {
    Graph g;
    Value q = g.parameter("q", {2, 37, 2, 3, 8});
    Value k = g.parameter("k", {2, 37, 2, 8});
    Value v = g.parameter("v", {2, 37, 2, 5});
    Value w = g.parameter("w", {2, 37, 2, 3, 5});
    Value fused = ops::attention(q, k, v, causal, 0.35);
    Value probs = ops::softmax(ops::scale(ops::einsum("btkgd,bskd->bkgts", q, k), 0.35), causal);
    Value plain = ops::einsum("bkgts,bskd->btkgd", probs, v);
    std::vector<int> outs;
    for (Value out : {fused, plain}) {
      outs.push_back(out.id);
      for (Value gr : gradients(ops::reduce_sum(out * w, {0, 1, 2, 3, 4}), {q, k, v}))
        outs.push_back(gr.id);
    }
    std::map<std::string, Tensor> leaves{{"q", random_tensor(q.shape(), 1, 1.5f)},
                                         {"k", random_tensor(k.shape(), 2, 1.5f)},
                                         {"v", random_tensor(v.shape(), 3)},
                                         {"w", random_tensor(w.shape(), 4)}};
    std::vector<Tensor> r = evaluate(g, leaves, outs);
    const char* what[] = {"output", "dq", "dk", "dv"};
    for (int i = 0; i < 4; ++i)
      EXPECT_LT(max_relative_error(r[i], r[4 + i]), 1e-5) << what[i] << (causal ? " causal" : "");
  }
}

TEST(Attention, MismatchedOperandsAreErrors) {
  Graph g;
  Value q = g.parameter("q", {2, 5, 3, 4});
  Value k = g.parameter("k", {2, 6, 3, 4});
  Value bad_v = g.parameter("v", {2, 5, 3, 4});  // 5 values for 6 keys
  EXPECT_THROW(ops::attention(q, k, bad_v, true, 0.5), Error);
  Value bad_k = g.parameter("k2", {2, 6, 2, 4});  // 2 heads where q has 3
  EXPECT_THROW(ops::attention(q, bad_k, bad_k, false, 0.5), Error);
}

// `ids` evaluated on random q, k, v and dout (scores of a useful spread).
std::vector<Tensor> evaluate_on_random(const Graph& g, Value q, Value k, Value v, Value dout,
                                       const std::vector<int>& ids) {
  return evaluate(g,
                  {{"q", random_tensor(q.shape(), 1, 1.5f)},
                   {"k", random_tensor(k.shape(), 2, 1.5f)},
                   {"v", random_tensor(v.shape(), 3)},
                   {"dout", random_tensor(dout.shape(), 4)}},
                  ids);
}

// The backward pass is two ops: the softmax statistics (AttentionGrad with
// wrt 3) and dq, dk and dv in one pass that reads them (wrt 4, stacked).
// Its gradients are those of the op per gradient (wrt 0, 1, 2, which
// recompute the scores each), to the bit: each sum runs in the same order
// (but with a sliding window, where the q gradient's own op starts its key
// tiles at the window); and a gradient op without the statistics input
// computes the same ones. That holds where the tiles are tile_gemm's
// single chains; a build without AVX2 or AVX-512 multiplies them with
// OpenBLAS, whose Haswell and Zen kernels sum a tile's product in another
// order for another call's shapes (2.5e-8 apart on an AMD EPYC; its
// Sandybridge kernels agree to the bit), so there they agree to 1e-6.
TEST(Attention, OnePassGivesTheBitsOfAnOpPerGradient) {
  struct Shapes {
    int64_t t, s, dk, dv;
    bool causal;
    int64_t window;
  };
  const Shapes cases[] = {{70, 70, 16, 8, true, 0},
                          {37, 37, 8, 12, false, 0},
                          {33, 130, 8, 12, true, 0},
                          {70, 70, 16, 16, true, 40}};
  for (const Shapes& c : cases) {
    Graph g;
    Value q = g.parameter("q", {2, c.t, 3, c.dk});
    Value k = g.parameter("k", {2, c.s, 3, c.dk});
    Value v = g.parameter("v", {2, c.s, 3, c.dv});
    Value dout = g.parameter("dout", {2, c.t, 3, c.dv});
    Value out = ops::attention(q, k, v, c.causal, 0.25, c.window);
    std::vector<Value> grads = gradients(ops::reduce_sum(out * dout, {0, 1, 2, 3}), {q, k, v});
    int statistics = 0, passes = 0, stats_id = -1;
    for (int id = 0; id < g.size(); ++id) {
      const Node& n = g.node(id);
      if (n.op != Op::AttentionGrad) continue;
      const int wrt = n.attr<AttentionAttrs>().wrt;
      statistics += wrt == 3;
      if (wrt == 3) stats_id = id;
      passes += wrt == 4 && n.inputs.size() == 6 && n.inputs[5] == stats_id;
    }
    EXPECT_EQ(statistics, 1);
    EXPECT_EQ(passes, 1);
    AttentionAttrs a = g.node(out.id).attr<AttentionAttrs>();
    std::vector<int> ids{grads[0].id, grads[1].id, grads[2].id};
    for (bool with_stats : {true, false})
      for (int wrt = 0; wrt < 3; ++wrt) {
        a.wrt = wrt;
        std::vector<Value> in{q, k, v, out, dout};
        if (with_stats) in.push_back(g.value(stats_id));
        ids.push_back(g.add(Op::AttentionGrad, in, a).id);
      }
    const std::vector<Tensor> r = evaluate_on_random(g, q, k, v, dout, ids);
    for (int i = 0; i < 6; ++i)
      EXPECT_LE(max_relative_error(r[i % 3], r[3 + i]),
                c.window > 0 || !kTileGemmVectorised ? 1e-6 : 0.0)
          << "wrt " << i % 3 << (i < 3 ? " reading" : " without") << " the statistics, t" << c.t
          << " s" << c.s << " window " << c.window;
  }
}

// Grouped queries: the pass keeps dk and dv per query head and the vjp sums
// each group; the ops per gradient sum the group inside (another order).
TEST(Attention, OnePassMatchesAnOpPerGradientForGroupedQueries) {
  Graph g;
  Value q = g.parameter("q", {2, 45, 2, 3, 8});
  Value k = g.parameter("k", {2, 45, 2, 8});
  Value v = g.parameter("v", {2, 45, 2, 6});
  Value dout = g.parameter("dout", {2, 45, 2, 3, 6});
  Value out = ops::attention(q, k, v, true, 0.3);
  std::vector<Value> grads = gradients(ops::reduce_sum(out * dout, {0, 1, 2, 3, 4}), {q, k, v});
  AttentionAttrs a = g.node(out.id).attr<AttentionAttrs>();
  std::vector<int> ids{grads[0].id, grads[1].id, grads[2].id};
  for (int wrt = 0; wrt < 3; ++wrt) {
    a.wrt = wrt;
    ids.push_back(g.add(Op::AttentionGrad, {q, k, v, out, dout}, a).id);
  }
  const std::vector<Tensor> r = evaluate_on_random(g, q, k, v, dout, ids);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].shape(), r[3 + i].shape());
    EXPECT_LT(max_relative_error(r[i], r[3 + i]), 1e-6) << "wrt " << i;
  }
}

}  // namespace
}  // namespace autoshard
