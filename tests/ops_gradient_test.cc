// Every primitive's gradient against central finite differences, and the
// einsum kernel against a naive loop over all letters.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/einsum_equation.h"
#include "ir/ops/depthwise.h"
#include "ir/ops/gemm.h"
#include "ir/ops/vision_kernels.h"
#include "ir/ops/winograd.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::evaluate;
using testing::random_ids;
using testing::random_tensor;

// Builds y = f(params) on a fresh graph, forms loss = sum(y * w) for a fixed
// random w, and compares d loss / d param against central differences.
void check_gradient(const std::string& what, const std::vector<Shape>& shapes,
                    const std::function<Value(Graph&, std::vector<Value>&)>& f,
                    std::map<std::string, Tensor> extra = {}, double tol = 2e-3) {
  Graph g;
  std::vector<Value> params;
  std::map<std::string, Tensor> leaves = extra;
  for (size_t i = 0; i < shapes.size(); ++i) {
    std::string name = "p" + std::to_string(i);
    params.push_back(g.parameter(name, shapes[i]));
    leaves[name] = random_tensor(shapes[i], 100 + i, 0.8f);
  }
  Value y = f(g, params);
  Value w = g.parameter("w", y.shape());
  leaves["w"] = random_tensor(y.shape(), 999);
  Value loss = ops::reduce_sum(y * w, [&] {
    std::vector<int64_t> axes;
    for (int a = 0; a < y.rank(); ++a) axes.push_back(a);
    return axes;
  }());
  std::vector<Value> grads = gradients(loss, params);
  std::vector<int> outs{loss.id};
  for (Value gv : grads) outs.push_back(gv.id);
  std::vector<Tensor> analytic = evaluate(g, leaves, outs);

  for (size_t p = 0; p < params.size(); ++p) {
    Tensor& x = leaves["p" + std::to_string(p)];
    Tensor numeric(x.shape());
    for (int64_t e = 0; e < x.numel(); ++e) {
      const float orig = x.f32()[e];
      const float h = 1e-2f * std::max(1.0f, std::fabs(orig));
      x.f32()[e] = orig + h;
      double up = evaluate(g, leaves, {loss.id})[0].item();
      x.f32()[e] = orig - h;
      double down = evaluate(g, leaves, {loss.id})[0].item();
      x.f32()[e] = orig;
      numeric.f32()[e] = static_cast<float>((up - down) / (2.0 * h));
    }
    double err = max_relative_error(analytic[p + 1], numeric);
    EXPECT_LT(err, tol) << what << ": gradient of input " << p;
  }
}

TEST(Gradient, EinsumDense) {
  check_gradient("btc,cd->btd", {{2, 3, 4}, {4, 5}},
                 [](Graph&, auto& p) { return ops::einsum("btc,cd->btd", p[0], p[1]); });
}
TEST(Gradient, EinsumHeads) {
  check_gradient("btc,chd->bthd", {{2, 3, 4}, {4, 2, 3}},
                 [](Graph&, auto& p) { return ops::einsum("btc,chd->bthd", p[0], p[1]); });
}
TEST(Gradient, EinsumAttentionScores) {
  check_gradient("bqhd,bkhd->bhqk", {{2, 3, 2, 4}, {2, 3, 2, 4}},
                 [](Graph&, auto& p) { return ops::einsum("bqhd,bkhd->bhqk", p[0], p[1]); });
}
TEST(Gradient, EinsumAttentionValues) {
  check_gradient("bhqk,bkhd->bqhd", {{2, 2, 3, 3}, {2, 3, 2, 4}},
                 [](Graph&, auto& p) { return ops::einsum("bhqk,bkhd->bqhd", p[0], p[1]); });
}
TEST(Gradient, EinsumSummedLetterAndOuter) {
  check_gradient("abx,cy->bac", {{2, 3, 2}, {4, 3}},
                 [](Graph&, auto& p) { return ops::einsum("abx,cy->bac", p[0], p[1]); });
}
TEST(Gradient, AddSubMulDivBroadcast) {
  check_gradient("add", {{3, 4}, {4}}, [](Graph&, auto& p) { return p[0] + p[1]; });
  check_gradient("sub", {{3, 1}, {2, 1, 4}}, [](Graph&, auto& p) { return p[0] - p[1]; });
  check_gradient("mul", {{2, 3, 4}, {3, 1}}, [](Graph&, auto& p) { return p[0] * p[1]; });
  check_gradient("div", {{3, 4}, {4}}, [](Graph& g, auto& p) {
    return p[0] / (p[1] * p[1] + ops::constant(g, {}, 1.0));
  });
}
TEST(Gradient, ScaleAndActivations) {
  check_gradient("scale", {{5}}, [](Graph&, auto& p) { return ops::scale(p[0], -2.5); });
  check_gradient("gelu tanh", {{3, 5}}, [](Graph&, auto& p) { return ops::gelu(p[0], true); });
  check_gradient("gelu erf", {{3, 5}}, [](Graph&, auto& p) { return ops::gelu(p[0], false); });
  check_gradient("relu", {{3, 5}}, [](Graph&, auto& p) { return ops::relu(p[0]); });
  check_gradient("tanh", {{3, 5}}, [](Graph&, auto& p) { return ops::tanh(p[0]); });
  check_gradient("silu", {{3, 5}}, [](Graph&, auto& p) { return ops::silu(p[0]); });
}
// relu_grad(x, dy) is dy masked by x > 0 (keras.ops's comparisons are
// relu_grad(a - b, 1)): linear in dy, broadcast here, no gradient in x.
TEST(Gradient, ReluGradThroughItsMaskedOperand) {
  check_gradient("relu_grad", {{2, 3}},
                 [](Graph& g, auto& p) {
                   return g.add(Op::ReluGrad, {g.input("x", {4, 2, 3}), p[0]});
                 },
                 {{"x", random_tensor({4, 2, 3}, 7)}});
}
TEST(Gradient, ReduceAndBroadcast) {
  check_gradient("reduce_sum", {{2, 3, 4}}, [](Graph&, auto& p) {
    return ops::reduce_sum(p[0], {0, 2});
  });
  check_gradient("reduce_mean", {{2, 3, 4}},
                 [](Graph&, auto& p) { return ops::reduce_mean(p[0], {1}); });
  check_gradient("broadcast_to", {{3, 1}}, [](Graph&, auto& p) {
    return ops::broadcast_to(p[0], {2, 3, 4});
  });
}
TEST(Gradient, Softmax) {
  check_gradient("softmax", {{2, 3, 5}}, [](Graph&, auto& p) { return ops::softmax(p[0]); });
  check_gradient("causal softmax", {{2, 4, 4}},
                 [](Graph&, auto& p) { return ops::softmax(p[0], true); });
}
TEST(Gradient, FusedAttention) {
  check_gradient("causal attention", {{2, 5, 2, 3}, {2, 6, 2, 3}, {2, 6, 2, 4}},
                 [](Graph&, auto& p) { return ops::attention(p[0], p[1], p[2], true, 0.6); });
}
TEST(Gradient, GroupedQueryAttention) {
  check_gradient("grouped attention", {{2, 4, 2, 3, 3}, {2, 5, 2, 3}, {2, 5, 2, 2}},
                 [](Graph&, auto& p) { return ops::attention(p[0], p[1], p[2], true, 0.6); });
}
// Gemma 2's attention: scores soft-capped (at a cap they reach), a window of
// 3 keys over 7 queries.
TEST(Gradient, SoftCappedSlidingWindowAttention) {
  check_gradient("soft-capped windowed attention", {{2, 7, 2, 2, 3}, {2, 7, 2, 3}, {2, 7, 2, 2}},
                 [](Graph&, auto& p) {
                   return ops::attention(p[0], p[1], p[2], true, 1.5, /*window=*/3,
                                         /*softcap=*/0.8);
                 });
}
// The same with 20 queries over 70 keys (a head of 16 queries or more packs
// its keys and values for the tile kernel) and a window of 9: every path of
// the packed tiles, soft cap included.
TEST(Gradient, SoftCappedWindowedAttentionOverPackedKeys) {
  check_gradient("soft-capped windowed attention, packed",
                 {{1, 20, 1, 2, 3}, {1, 70, 1, 3}, {1, 70, 1, 2}}, [](Graph&, auto& p) {
                   return ops::attention(p[0], p[1], p[2], true, 1.5, /*window=*/9,
                                         /*softcap=*/0.8);
                 });
}
TEST(Gradient, Normalize) {
  check_gradient("normalize", {{3, 6}}, [](Graph&, auto& p) { return ops::normalize(p[0], 1e-5); });
  check_gradient("rms normalize", {{3, 6}},
                 [](Graph&, auto& p) { return ops::normalize(p[0], 1e-5, false); });
}
TEST(Gradient, Rotary) {
  Tensor positions = Tensor::from_ints({3}, {0, 5, 2});
  RotaryAttrs llama3{.theta = 500.0, .factor = 8, .original_max_positions = 16};
  for (const RotaryAttrs& a : {RotaryAttrs{.theta = 100.0}, llama3})
    check_gradient("rotary", {{2, 3, 2, 6}},
                   [&](Graph& g, auto& p) {
                     return ops::rotary(p[0], g.input("positions", {3}, DType::I32), a);
                   },
                   {{"positions", positions}});
}
// Rotary against the formula written out: head dim 4, pairs (0, 2) and (1, 3)
// turned by position * theta^(-2i/4); Llama 3's scaling divides the long
// wavelengths by the factor and leaves the short ones.
TEST(Gradient, LstmCell) {
  const std::vector<Shape> shapes{{3, 4, 5}, {3, 4, 5}, {2, 3, 5}};
  check_gradient("lstm_cell", shapes,
                 [](Graph&, auto& p) { return ops::lstm_cell(p[0], p[1], p[2]); });
  Tensor mask({3, 1});
  mask.f32()[0] = 1.0f;
  mask.f32()[1] = 0.0f;
  mask.f32()[2] = 0.25f;  // any value interpolates between the state and the step
  check_gradient("lstm_cell masked", shapes,
                 [](Graph& g, auto& p) {
                   return ops::lstm_cell(p[0], p[1], p[2], g.parameter("mask", {3, 1}));
                 },
                 {{"mask", mask}});
}

TEST(Gradient, GruCell) {
  const std::vector<Shape> shapes{{3, 3, 5}, {3, 3, 5}, {3, 5}};
  check_gradient("gru_cell", shapes,
                 [](Graph&, auto& p) { return ops::gru_cell(p[0], p[1], p[2]); });
  Tensor mask({3, 1});
  mask.f32()[0] = 1.0f;
  mask.f32()[1] = 0.0f;
  mask.f32()[2] = 0.25f;  // any value interpolates between h and the step
  check_gradient("gru_cell masked", shapes,
                 [](Graph& g, auto& p) {
                   return ops::gru_cell(p[0], p[1], p[2], g.parameter("mask", {3, 1}));
                 },
                 {{"mask", mask}});
}

TEST(Rotary, TurnsPairsByPositionTimesFrequency) {
  Graph g;
  Value x = g.input("x", {1, 2, 1, 4});
  Value pos = g.input("pos", {2}, DType::I32);
  Value plain = ops::rotary(x, pos, RotaryAttrs{.theta = 100.0});
  // Wavelengths 2 pi and 20 pi; with 40 original positions and frequency
  // factors 1 and 4, 20 pi (> 40) is slowed 8x and 2 pi (< 10) kept.
  Value scaled =
      ops::rotary(x, pos, RotaryAttrs{.theta = 100.0, .factor = 8, .original_max_positions = 40});
  std::map<std::string, Tensor> leaves{{"x", Tensor::from({1, 2, 1, 4}, {1, 2, 3, 4, 1, 2, 3, 4})},
                                       {"pos", Tensor::from_ints({2}, {0, 3})}};
  std::vector<Tensor> y = evaluate(g, leaves, {plain.id, scaled.id});
  for (int k = 0; k < 2; ++k) {
    const double f[2] = {1.0, k == 0 ? 0.1 : 0.1 / 8};
    for (int i = 0; i < 2; ++i) {
      const double c = std::cos(3 * f[i]), s = std::sin(3 * f[i]);
      const double a = 1 + i, b = 3 + i;  // the pair (x_i, x_{i+2})
      EXPECT_NEAR(y[k].f32()[i], a, 1e-6) << "position 0 does not turn";
      EXPECT_NEAR(y[k].f32()[4 + i], a * c - b * s, 1e-5);
      EXPECT_NEAR(y[k].f32()[4 + i + 2], b * c + a * s, 1e-5);
    }
  }
}
TEST(Gradient, CrossEntropy) {
  Tensor targets = random_ids({2, 3}, 5, 4);
  check_gradient("cross_entropy", {{2, 3, 5}},
                 [](Graph& g, auto& p) {
                   return ops::cross_entropy(p[0], g.input("targets", {2, 3}, DType::I32));
                 },
                 {{"targets", targets}});
}
TEST(Gradient, GatherEmbedding) {
  Tensor ids = random_ids({2, 4}, 6, 5);
  check_gradient("gather", {{6, 3}},
                 [](Graph& g, auto& p) {
                   return ops::gather(p[0], g.input("ids", {2, 4}, DType::I32));
                 },
                 {{"ids", ids}});
}
// scatter_add (keras.ops.scatter): its values' gradient is a gather of the
// table's gradient at their ids (repeated ids each get their row).
TEST(Gradient, ScatterAddValues) {
  Tensor ids = random_ids({2, 4}, 6, 7);
  ids.i32()[1] = ids.i32()[0];  // a repeated id
  check_gradient("scatter_add", {{2, 4, 3}},
                 [](Graph& g, auto& p) {
                   return g.add(Op::ScatterAdd, {g.input("ids", {2, 4}, DType::I32), p[0]},
                                ScatterAddAttrs{{6, 3}, {}, 0});
                 },
                 {{"ids", ids}});
}
TEST(Gradient, ReshapeTransposeDropout) {
  check_gradient("reshape", {{2, 6}}, [](Graph&, auto& p) { return ops::reshape(p[0], {3, 4}); });
  check_gradient("transpose", {{2, 3, 4}}, [](Graph&, auto& p) {
    return ops::transpose(p[0], {2, 0, 1});
  });
  check_gradient("dropout", {{4, 5}}, [](Graph&, auto& p) { return ops::dropout(p[0], 0.3, 17); });
}

// Autodiff rules read their node while appending its gradient. Padding the
// graph by 0..40 nodes puts every append at every point of the node
// storage's growth; with storage that moves nodes (a vector) some rule then
// reads freed memory, which AddressSanitizer reports.
TEST(Gradient, RulesSurviveGraphGrowth) {
  using Builder = std::function<Value(Graph&, Value, Value)>;
  const std::vector<std::pair<std::string, Builder>> builders = {
      {"add",
       [](Graph&, Value a, Value b) {
         return a + ops::reshape(b, {1, 4});
       }},
      {"sub",
       [](Graph&, Value a, Value b) {
         return a - ops::reshape(b, {1, 4});
       }},
      {"mul",
       [](Graph&, Value a, Value b) {
         return a * ops::reshape(b, {1, 4});
       }},
      {"div",
       [](Graph&, Value a, Value b) {
         return a / ops::reshape(b, {1, 4});
       }},
      {"einsum", [](Graph&, Value a, Value b) { return ops::einsum("ij,j->i", a, b); }},
      {"gelu", [](Graph&, Value a, Value) { return ops::gelu(a); }},
      {"softmax", [](Graph&, Value a, Value) { return ops::softmax(a, true); }},
      {"normalize", [](Graph&, Value a, Value) { return ops::normalize(a, 1e-5); }},
      {"reduce", [](Graph&, Value a, Value) { return ops::reduce_mean(a, {0}); }},
      {"dropout", [](Graph&, Value a, Value) { return ops::dropout(a, 0.5, 1); }},
      {"transpose",
       [](Graph&, Value a, Value) {
         return ops::transpose(a, {1, 0});
       }},
      {"gather",
       [](Graph& g, Value a, Value) { return ops::gather(a, g.input("ids", {3}, DType::I32)); }},
      {"cross_entropy", [](Graph& g, Value a, Value) {
         return ops::cross_entropy(a, g.input("t", {4}, DType::I32));
       }}};
  for (const auto& [name, build] : builders)
    for (int pad = 0; pad <= 40; ++pad) {
      Graph g;
      for (int k = 0; k < pad; ++k) ops::constant(g, {}, k);
      Value a = g.parameter("a", {4, 4}), b = g.parameter("b", {4});
      Value y = build(g, a, b);
      std::vector<int64_t> all;
      for (int d = 0; d < y.rank(); ++d) all.push_back(d);
      Value loss = ops::reduce_sum(y, all);
      std::vector<Value> grads = gradients(loss, {a, b});
      EXPECT_EQ(grads[0].shape(), a.shape()) << name << " pad " << pad;
      EXPECT_EQ(grads[1].shape(), b.shape()) << name << " pad " << pad;
    }
}

// ---- einsum kernel against a naive loop ----

Tensor naive_einsum(const std::string& eq, const Tensor& a, const Tensor& b) {
  EinsumEquation e = parse_einsum(eq);
  std::map<char, int64_t> size;
  for (size_t i = 0; i < e.a.size(); ++i) size[e.a[i]] = a.shape()[i];
  for (size_t i = 0; i < e.b.size(); ++i) size[e.b[i]] = b.shape()[i];
  std::string letters;
  for (auto& [c, s] : size) letters += c;
  Shape out_shape;
  for (char c : e.out) out_shape.push_back(size[c]);
  Tensor out(out_shape);
  std::map<char, int64_t> idx;
  auto offset = [&](const std::string& term, const Shape& shape) {
    int64_t off = 0;
    for (size_t i = 0; i < term.size(); ++i) off = off * shape[i] + idx[term[i]];
    return off;
  };
  std::function<void(size_t)> loop = [&](size_t d) {
    if (d == letters.size()) {
      out.f32()[offset(e.out, out_shape)] +=
          a.f32()[offset(e.a, a.shape())] * b.f32()[offset(e.b, b.shape())];
      return;
    }
    for (idx[letters[d]] = 0; idx[letters[d]] < size[letters[d]]; ++idx[letters[d]]) loop(d + 1);
  };
  loop(0);
  return out;
}

TEST(Einsum, MatchesNaiveLoops) {
  struct Case {
    std::string eq;
    Shape a, b;
  };
  std::vector<Case> cases = {{"ij,jk->ik", {3, 4}, {4, 5}},
                             {"ij,kj->ik", {3, 4}, {5, 4}},
                             {"ji,jk->ik", {4, 3}, {4, 5}},
                             {"ij,jk->ki", {3, 4}, {4, 5}},
                             {"btc,vc->btv", {2, 3, 4}, {7, 4}},
                             {"bqhd,bkhd->bhqk", {2, 3, 2, 4}, {2, 5, 2, 4}},
                             {"bhqk,bkhd->bqhd", {2, 2, 3, 5}, {2, 5, 2, 4}},
                             {"bthd,hdc->btc", {2, 3, 2, 4}, {2, 4, 5}},
                             {"btc,btd->cd", {2, 3, 4}, {2, 3, 5}},
                             {"abc,cab->", {2, 3, 4}, {4, 2, 3}},
                             {"ik,jk->kji", {3, 4}, {2, 4}},
                             {"i,j->ij", {3}, {4}},
                             {"xy,yz->zx", {1, 3}, {3, 1}},
                             {"bij,bjk->bik", {3, 2, 4}, {3, 4, 1}},
                             // Copies in several chunks of rows: an operand's
                             // whole rows (a time-major projection), and a
                             // product permuted into the output with a stride.
                             {"btk,kv->tbv", {4, 300, 64}, {64, 8}},
                             {"bij,bjk->ikb", {64, 30, 3}, {64, 3, 40}}};
  for (const Case& c : cases) {
    Graph g;
    Value a = g.parameter("a", c.a), b = g.parameter("b", c.b);
    Value y = ops::einsum(c.eq, a, b);
    Tensor ta = random_tensor(c.a, 1), tb = random_tensor(c.b, 2);
    Tensor got = evaluate(g, {{"a", ta}, {"b", tb}}, {y.id})[0];
    EXPECT_LT(max_relative_error(got, naive_einsum(c.eq, ta, tb)), 1e-5) << c.eq;
  }
}

// C = alpha op(A) op(B) + beta C by the plain sum (row-major, strided), the
// reference for the BLAS behind sgemm.
void plain_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* a, int64_t lda,
                const float* b, int64_t ldb, float* c, int64_t ldc, double alpha, double beta) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += double(ta ? a[k * lda + i] : a[i * lda + k]) * (tb ? b[j * ldb + k] : b[k * ldb + j]);
      c[i * ldc + j] = float(alpha * s + beta * c[i * ldc + j]);
    }
}

// sgemm equals the plain sum for every transpose, with alpha, an accumulating
// beta, leading dimensions wider than the rows (a block of a larger matrix),
// and an empty contraction (a device's empty shard of K: C = beta C).
TEST(Einsum, GemmMatchesThePlainProduct) {
  const int64_t M = 37, N = 29, pad = 3;
  for (int64_t K : {45, 0})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const int64_t lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
        // K + 1 rows: never an empty tensor, even for K = 0.
        Tensor a = random_tensor({ta ? K + 1 : M, lda}, 1);
        Tensor b = random_tensor({tb ? N : K + 1, ldb}, 2);
        Tensor c = random_tensor({M, ldc}, 3), want = c.clone();
        plain_gemm(ta, tb, M, N, K, a.f32(), lda, b.f32(), ldb, want.f32(), ldc, 0.5, 2.0);
        sgemm(ta, tb, M, N, K, a.f32(), lda, b.f32(), ldb, c.f32(), ldc, 0.5f, 2.0f);
        EXPECT_LT(max_relative_error(c, want), 1e-5) << "K=" << K << ta << tb;
      }
}

// One row of C runs as a matrix-vector product: it equals the plain sum, for
// every transpose, with alpha and an accumulating beta.
TEST(Einsum, GemmOfOneRowMatchesThePlainProduct) {
  const int64_t N = 7, K = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const int64_t lda = ta ? 3 : K;  // a transposed A: the row is a strided column
      Tensor a = random_tensor(ta ? Shape{K, 3} : Shape{1, K}, 1);
      Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 2);
      Tensor c = random_tensor({1, N}, 3), want = c.clone();
      plain_gemm(ta, tb, 1, N, K, a.f32(), lda, b.f32(), tb ? K : N, want.f32(), N, 0.5, 2.0);
      sgemm(ta, tb, 1, N, K, a.f32(), lda, b.f32(), tb ? K : N, c.f32(), N, 0.5f, 2.0f);
      EXPECT_LT(max_relative_error(c, want), 1e-6) << ta << tb;
    }
}

// Sizes beyond BLAS's ints are split into blocks: the blocked product (here
// with blocks of at most 2) equals the single call, for every transpose.
TEST(Einsum, GemmSplitIntoBlocksMatchesOneCall) {
  const int64_t M = 5, N = 7, K = 9;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = random_tensor(ta ? Shape{K, M} : Shape{M, K}, 1);
      Tensor b = random_tensor(tb ? Shape{N, K} : Shape{K, N}, 2);
      Tensor whole({M, N}), blocked({M, N});
      const int64_t lda = ta ? M : K, ldb = tb ? K : N;
      sgemm(ta, tb, M, N, K, a.f32(), lda, b.f32(), ldb, whole.f32(), N);
      sgemm(ta, tb, M, N, K, a.f32(), lda, b.f32(), ldb, blocked.f32(), N, /*alpha=*/1.0f,
            /*beta=*/0.0f,
            /*max_dim=*/2);
      EXPECT_LT(max_relative_error(blocked, whole), 1e-6) << ta << tb;
    }
  float x = 0;
  EXPECT_THROW(sgemm(false, false, 1, 1, 1, &x, int64_t{1} << 32, &x, 1, &x, 1), Error);
}

ConvAttrs conv_attrs(std::vector<int64_t> strides, std::vector<int64_t> dil,
                     std::vector<int64_t> lo, std::vector<int64_t> hi, int64_t groups = 1) {
  ConvAttrs a;
  a.strides = std::move(strides), a.dilations = std::move(dil);
  a.pad_lo = std::move(lo), a.pad_hi = std::move(hi), a.groups = groups;
  return a;
}

TEST(Gradient, Convolutions) {
  // 2-D, stride 2 on an odd image with 'same' padding (the odd zero after).
  check_gradient("conv2d", {{2, 5, 4, 3}, {3, 3, 3, 4}}, [](Graph&, auto& p) {
    return ops::conv(p[0], p[1], conv_attrs({2, 2}, {1, 1}, {1, 0}, {1, 1}));
  });
  // Groups, and a dilated depthwise 1-D kernel.
  check_gradient("grouped conv2d", {{2, 4, 3, 4}, {2, 2, 2, 6}}, [](Graph&, auto& p) {
    return ops::conv(p[0], p[1], conv_attrs({1, 1}, {1, 1}, {0, 1}, {1, 0}, 2));
  });
  check_gradient("depthwise conv1d", {{2, 7, 3}, {3, 1, 6}}, [](Graph&, auto& p) {
    return ops::conv(p[0], p[1], conv_attrs({2}, {2}, {2}, {2}, 3));
  });
  // The transposed convolution (the input gradient as an op) and the filter
  // gradient as an op: their own gradients are convolutions again.
  check_gradient("conv_grad_input", {{2, 3, 2, 4}, {3, 3, 3, 4}}, [](Graph&, auto& p) {
    ConvAttrs a = conv_attrs({2, 2}, {1, 1}, {1, 0}, {1, 1});
    a.shape = {2, 5, 4, 3};
    return ops::conv_grad_input(p[0], p[1], a);
  });
  check_gradient("conv_grad_filter", {{2, 5, 4, 3}, {2, 3, 2, 4}}, [](Graph& g, auto& p) {
    ConvAttrs a = conv_attrs({2, 2}, {1, 1}, {1, 0}, {1, 1});
    a.shape = {3, 3, 3, 4};
    return g.add(Op::ConvGradFilter, {p[0], p[1]}, a);
  });
}

TEST(Gradient, PoolingPadAndUnary) {
  check_gradient("max pool", {{2, 5, 4, 3}}, [](Graph&, auto& p) {
    return ops::pool(p[0], PoolAttrs{true, {3, 2}, {2, 2}, {1, 0}, {1, 0}});
  });
  check_gradient("average pool, same", {{2, 5, 4, 3}}, [](Graph&, auto& p) {
    return ops::pool(p[0], PoolAttrs{false, {2, 2}, {2, 2}, {0, 0}, {1, 0}});
  });
  check_gradient("pad and crop", {{2, 4, 3}}, [](Graph&, auto& p) {
    return ops::pad(p[0], {1, 0, -1}, {0, 2, 0});
  });
  check_gradient("concat", {{2, 1, 3}, {2, 3, 3}, {2, 2, 3}}, [](Graph&, auto& p) {
    return ops::concat({p[0], p[1], p[2], p[0]}, 1);  // p[0] twice: its two crops summed
  });
  // Resizing up and down (bilinear, nearest) and the adjoint as an op.
  check_gradient("resize bilinear", {{2, 5, 4, 3}}, [](Graph&, auto& p) {
    return ops::resize(ops::resize(p[0], 1, 8, false), 2, 3, false);
  });
  check_gradient("resize nearest", {{2, 5, 4, 3}}, [](Graph&, auto& p) {
    return ops::resize(ops::resize(p[0], 1, 3, true), 2, 7, true);
  });
  check_gradient("resize adjoint", {{2, 8, 3}}, [](Graph& g, auto& p) {
    return g.add(Op::Resize, {p[0]}, ResizeAttrs{1, 5, false, true});
  });
  for (UnaryFn fn :
       {UnaryFn::Sigmoid, UnaryFn::HardSigmoid, UnaryFn::HardSilu, UnaryFn::Relu6,
        UnaryFn::LeakyRelu, UnaryFn::Elu, UnaryFn::Selu, UnaryFn::Softplus, UnaryFn::Softsign,
        UnaryFn::Mish, UnaryFn::Exp, UnaryFn::Square, UnaryFn::Abs}) {
    // Scaled away from the kinks of the piecewise ones (0, and +-3 for hard_sigmoid).
    check_gradient(unary_name(fn), {{3, 5}},
                   [fn](Graph&, auto& p) { return ops::unary(ops::scale(p[0], 3.7), fn, 0.3); });
  }
  check_gradient("soft_cap", {{3, 5}},
                 [](Graph&, auto& p) { return ops::soft_cap(ops::scale(p[0], 3.7), 2.0); });
  for (UnaryFn fn : {UnaryFn::Log, UnaryFn::Sqrt, UnaryFn::Rsqrt})
    check_gradient(unary_name(fn), {{3, 5}}, [fn](Graph&, auto& p) {
      return ops::unary(ops::unary(p[0], UnaryFn::Exp), fn);
    });
  check_gradient("log_softmax", {{2, 3, 5}},
                 [](Graph&, auto& p) { return ops::log_softmax(p[0]); });
}

// The fast kernels (im2col + GEMM, pointwise straight into GEMM, Winograd
// for 3x3 with wide channels) against the plain loops, over strides,
// dilations, negative padding (a device's band), groups and a split channel
// offset.
TEST(Convolution, FastKernelsMatchThePlainLoops) {
  struct Case {
    ConvGeometry g;
    int64_t offset;
  };
  auto geo = [](int64_t in_h, int64_t in_w, int64_t k, int64_t s, int64_t d, int64_t pad,
                int64_t cin, int64_t cout, int64_t groups, int64_t group_out) {
    ConvGeometry g;
    g.batch = 3, g.in_h = in_h, g.in_w = in_w, g.k_h = in_h == 1 ? 1 : k, g.k_w = k;
    g.stride_h = s, g.stride_w = s, g.dil_h = d, g.dil_w = d;
    g.pad_h = in_h == 1 ? 0 : pad, g.pad_w = pad;
    g.out_h = in_h == 1 ? 1 : (in_h + 2 * pad - d * (g.k_h - 1) - 1) / s + 1;
    g.out_w = (in_w + 2 * pad - d * (k - 1) - 1) / s + 1;
    g.cin = cin, g.cout = cout, g.groups = groups, g.group_in = cin / groups;
    g.group_out = group_out;
    return g;
  };
  auto one_image = [](ConvGeometry g) {
    g.batch = 1;
    return g;
  };
  const std::vector<Case> cases{
      {geo(7, 5, 3, 2, 1, 1, 3, 5, 1, 5), 0},   // stride 2, same
      {geo(6, 6, 3, 1, 2, 2, 4, 6, 1, 6), 0},   // dilated
      {geo(5, 4, 1, 1, 1, 0, 5, 3, 1, 3), 0},   // pointwise
      {geo(6, 5, 3, 1, 1, -1, 4, 2, 1, 2), 0},  // a band: reads from row 1
      {geo(5, 5, 3, 1, 1, 1, 6, 4, 2, 2), 0},   // 2 groups
      {geo(5, 5, 3, 1, 1, 1, 6, 3, 2, 3), 2},   // 2 groups of 3, channels 2..4 held
      {geo(1, 9, 3, 2, 1, 1, 4, 8, 4, 2), 0},   // depthwise 1-D, multiplier 2
      // Depthwise of multiplier 1 (ir/ops/depthwise.h): 2-D, stride 2, 70
      // channels (a 64-channel block and 6); 1-D, dilated, valid.
      {geo(7, 9, 3, 2, 1, 1, 70, 70, 70, 1), 0},
      {geo(1, 20, 5, 1, 2, 0, 16, 16, 16, 1), 0},
      // Winograd F(2x2, 3x3) (ir/ops/winograd.h): same and valid padding,
      // odd output sizes (a tile cut off), a band, wide channels.
      {geo(9, 7, 3, 1, 1, 1, 16, 17, 1, 17), 0},
      {geo(8, 6, 3, 1, 1, 0, 20, 16, 1, 16), 0},
      {geo(7, 10, 3, 1, 1, -1, 16, 24, 1, 24), 0},
      {geo(4, 4, 3, 1, 1, 1, 64, 40, 1, 40), 0},
      // Blocked (ir/ops/winograd.cc): 48 tiles in blocks of 24, two partial
      // sums of the filter gradient; 2,700 tiles in 11 blocks of 256 (the
      // last 140), the filter gradient's 6 runs of 2 blocks and 1; then
      // channels too wide for blocks, in one pass and (batch 1, 64 tiles,
      // 63 a pass) in two, cout not a multiple of the 128-column pieces.
      {geo(8, 7, 3, 1, 1, 1, 128, 136, 1, 136), 0},
      {geo(60, 60, 3, 1, 1, 1, 16, 16, 1, 16), 0},
      {geo(5, 4, 3, 1, 1, 1, 257, 256, 1, 256), 0},
      {one_image(geo(16, 16, 3, 1, 1, 1, 16, 4112, 1, 4112)), 0},
  };
  int winograd = 0, depthwise = 0;
  for (const Case& c : cases) {
    const ConvGeometry& g = c.g;
    winograd += winograd_suits(g);
    depthwise += depthwise_suits(g, c.offset);
    const int64_t x_n = g.batch * g.in_h * g.in_w * g.cin;
    const int64_t y_n = g.batch * g.out_h * g.out_w * g.cout;
    const int64_t w_n = g.k_h * g.k_w * g.group_in * g.cout;
    Tensor x = random_tensor({x_n}, 1), w = random_tensor({w_n}, 2), dy = random_tensor({y_n}, 3);
    Tensor y1({y_n}), y2({y_n}), dx1({x_n}), dx2({x_n}), dw1({w_n}), dw2({w_n});
    conv_forward(g, c.offset, x.f32(), w.f32(), y1.f32());
    conv_forward_reference(g, c.offset, x.f32(), w.f32(), y2.f32());
    EXPECT_LT(max_relative_error(y1, y2), 1e-5) << "forward, case " << &c - cases.data();
    conv_backward_filter(g, c.offset, x.f32(), dy.f32(), dw1.f32());
    conv_backward_filter_reference(g, c.offset, x.f32(), dy.f32(), dw2.f32());
    EXPECT_LT(max_relative_error(dw1, dw2), 1e-5) << "filter, case " << &c - cases.data();
    if (c.offset != 0) continue;  // the input gradient's offset counts input channels
    conv_backward_input(g, 0, dy.f32(), w.f32(), dx1.f32());
    conv_backward_input_reference(g, 0, dy.f32(), w.f32(), dx2.f32());
    EXPECT_LT(max_relative_error(dx1, dx2), 1e-5) << "input, case " << &c - cases.data();
  }
  EXPECT_EQ(winograd, 8);  // the last eight cases run F(2x2, 3x3)
  EXPECT_EQ(depthwise, 2);
}

// Winograd's filter gradient sums runs of blocks cut by the geometry alone,
// and splits a run's points, or the forward pass its blocks, only where
// that cannot change an output's chain of sums, so any number of cores
// gives the same bits: one block (one run, its points shared out) and 14
// blocks (7 runs).
TEST(Convolution, WinogradGivesTheSameBitsOnAnyNumberOfCores) {
  auto geometry = [](int64_t hw, int64_t cin, int64_t cout) {
    ConvGeometry g;
    g.batch = 2, g.in_h = g.out_h = hw, g.in_w = g.out_w = hw + 2, g.k_h = g.k_w = 3;
    g.pad_h = g.pad_w = 1, g.cin = g.group_in = cin, g.cout = g.group_out = cout;
    return g;
  };
  for (const ConvGeometry& g : {geometry(12, 48, 40), geometry(72, 16, 24)}) {
    ASSERT_TRUE(winograd_suits(g));
    const int64_t x_n = g.batch * g.in_h * g.in_w * g.cin, y_n = x_n / g.cin * g.cout;
    const int64_t w_n = 9 * g.cin * g.cout;
    Tensor x = random_tensor({x_n}, 4), w = random_tensor({w_n}, 5), dy = random_tensor({y_n}, 6);
    auto run = [&](int cores) {
      IntraOpThreadsScope scope(cores);
      Tensor y({y_n}), dx({x_n}), dw({w_n});
      conv_forward(g, 0, x.f32(), w.f32(), y.f32());
      conv_backward_input(g, 0, dy.f32(), w.f32(), dx.f32());
      conv_backward_filter(g, 0, x.f32(), dy.f32(), dw.f32());
      return std::vector<Tensor>{y, dx, dw};
    };
    const std::vector<Tensor> one = run(1);
    for (int cores : {2, 3}) {
      const std::vector<Tensor> more = run(cores);
      for (size_t i = 0; i < one.size(); ++i)
        EXPECT_EQ(max_abs_diff(more[i], one[i]), 0.0) << g.in_h << ", " << cores << " cores, " << i;
    }
  }
}

// A convolution's forward value against a loop written here from Keras's
// definition (valid padding, stride 2, dilation 1, 2 groups).
TEST(Convolution, MatchesTheDefinition) {
  Graph g;
  Value x = g.parameter("x", {2, 6, 5, 4}), w = g.parameter("w", {3, 2, 2, 6});
  Value y = ops::conv(x, w, conv_attrs({2, 1}, {1, 2}, {0, 0}, {0, 0}, 2));
  ASSERT_EQ(y.shape(), (Shape{2, 2, 3, 6}));
  Tensor xt = random_tensor({2, 6, 5, 4}, 1), wt = random_tensor({3, 2, 2, 6}, 2);
  Tensor got = evaluate(g, {{"x", xt}, {"w", wt}}, {y.id})[0];
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t oh = 0; oh < 2; ++oh)
      for (int64_t ow = 0; ow < 3; ++ow)
        for (int64_t co = 0; co < 6; ++co) {
          double want = 0;
          const int64_t grp = co / 3;
          for (int64_t kh = 0; kh < 3; ++kh)
            for (int64_t kw = 0; kw < 2; ++kw)
              for (int64_t ci = 0; ci < 2; ++ci)
                want += xt.f32()[((b * 6 + oh * 2 + kh) * 5 + ow + 2 * kw) * 4 + grp * 2 + ci] *
                        wt.f32()[((kh * 2 + kw) * 2 + ci) * 6 + co];
          EXPECT_NEAR(got.f32()[((b * 2 + oh) * 3 + ow) * 6 + co], want, 1e-5);
        }
}

TEST(Convolution, BadShapesAreErrors) {
  Graph g;
  Value x = g.parameter("x", {2, 6, 5, 4}), w = g.parameter("w", {3, 3, 3, 6});
  EXPECT_THROW(ops::conv(x, w, conv_attrs({1, 1}, {1, 1}, {0, 0}, {0, 0})), Error);  // 4 vs 3
  Value w2 = g.parameter("w2", {8, 3, 4, 6});  // 6 rows give none of 8 (a band may hold none)
  EXPECT_THROW(ops::conv(x, w2, conv_attrs({1, 1}, {1, 1}, {0, 0}, {0, 0})), Error);  // too tall
  Value w3 = g.parameter("w3", {3, 3, 4, 6});
  EXPECT_THROW(ops::conv(x, w3, conv_attrs({0, 1}, {1, 1}, {0, 0}, {0, 0})), Error);  // stride 0
  EXPECT_THROW(ops::conv(x, w3, conv_attrs({1}, {1}, {0}, {0})), Error);  // one stride for 2 dims
  EXPECT_THROW(ops::pool(x, PoolAttrs{true, {8, 1}, {1, 1}, {0, 0}, {0, 0}}), Error);
  EXPECT_THROW(ops::pad(x, {0, -4, 0, 0}, {0, -3, 0, 0}), Error);
}

TEST(Einsum, BadEquationsAreErrors) {
  Graph g;
  Value a = g.parameter("a", {2, 3}), b = g.parameter("b", {3, 4});
  EXPECT_THROW(ops::einsum("ij,jk", a, b), Error);
  EXPECT_THROW(ops::einsum("ij,kk->ik", a, b), Error);
  EXPECT_THROW(ops::einsum("ijk,jk->ik", a, b), Error);  // rank mismatch
  EXPECT_THROW(ops::einsum("ij,jk->iz", a, b), Error);   // unknown output letter
  EXPECT_THROW(ops::einsum("ij,ik->jk", a, b), Error);   // i has sizes 2 and 3
}

}  // namespace
}  // namespace autoshard
