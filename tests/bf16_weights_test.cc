// Frozen weights held in bf16 (Tensor's DType::BF16, Graph::hold_in_bf16,
// Model::hold_frozen_weights_in_bf16): the conversions, the widening
// products (panels against the whole-operand path and plain loops, on odd
// shapes, forward and the input's gradient), gathers, the errors for a
// bf16 value read as f32 or asked for a gradient, and a LoRA Llama whose
// frozen base is bf16: the same losses and adapters as the f32 model whose
// base was rounded to bf16 first, on one device and sharded, in half the
// bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/weight_store.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/sharded_executor.h"
#include "ir/ops/bf16_gemm.h"
#include "tensor/quantize.h"
#include "test_util.h"

namespace autoshard {
namespace bf16_weights_test {

using testing::error_of;
using testing::kTestData;
using testing::random_tensor;

// x rounded to bf16 and widened back: the values a bf16 weight holds.
Tensor rounded(const Tensor& x) {
  return x.converted(DType::BF16).converted(DType::F32);
}

TEST(Bf16Weights, TensorConversionRoundsToNearestEvenAndWidensExactly) {
  const Tensor x = random_tensor({3, 7}, 1);
  const Tensor h = x.converted(DType::BF16);
  EXPECT_EQ(h.dtype(), DType::BF16);
  EXPECT_STREQ(dtype_name(h.dtype()), "bf16");
  EXPECT_EQ(h.nbytes() * 2, x.nbytes());
  const Tensor w = h.converted(DType::F32);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(x.f32()[i]);
    // Round to nearest even of the top 16 bits, by integer arithmetic.
    const uint32_t low = bits & 0xffff, top = bits >> 16;
    const uint32_t want = low > 0x8000 || (low == 0x8000 && (top & 1)) ? top + 1 : top;
    EXPECT_EQ(h.data<uint16_t>()[i], want) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(w.f32()[i]), want << 16) << i;
  }
  EXPECT_EQ(x.converted(DType::F32).raw(), x.raw());  // the same dtype: shared
  EXPECT_NE(error_of([&] { (void)h.f32(); }).find("bf16"), std::string::npos);
  EXPECT_NE(error_of([&] {
              (void)Tensor({2}, DType::I32).converted(DType::BF16);
            }).find("only f32 <-> bf16"),
            std::string::npos);
}

// C = op(A) op(B) + beta C in doubles, and sum |terms| per element (the
// scale of a float sum's rounding).
void loops(int64_t M, int64_t N, int64_t K, const Tensor& a, bool ta, const Tensor& b, bool tb,
           const std::vector<float>& c0, float beta, std::vector<double>& c,
           std::vector<double>& magnitude) {
  c.assign(size_t(M * N), 0);
  magnitude.assign(size_t(M * N), 0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double sum = double(beta) * c0[size_t(i * N + j)], mag = std::fabs(sum);
      for (int64_t k = 0; k < K; ++k) {
        const double t = double(a.f32()[ta ? k * M + i : i * K + k]) *
                         double(b.f32()[tb ? j * K + k : k * N + j]);
        sum += t;
        mag += std::fabs(t);
      }
      c[size_t(i * N + j)] = sum;
      magnitude[size_t(i * N + j)] = mag;
    }
}

// The panels' product equals the whole-operand path and plain loops on odd
// shapes (one crossing several panels), either operand or both in bf16, in
// every orientation, adding into C or not.
TEST(Bf16Weights, WideningProductEqualsWholeOperandPathAndLoops) {
  struct Case {
    int64_t M, N, K;
  };
  // 37 x 3001 x 700: B's panels are 1488 columns of 700 (4 MiB), so three.
  const std::vector<Case> cases = {{1, 1, 1},   {3, 17, 5}, {1, 37, 13},
                                   {19, 1, 23}, {5, 7, 0},  {37, 3001, 700}};
  uint64_t seed = 10;
  for (const Case& s : cases)
    for (int which = 1; which <= 3; ++which)  // 1: A bf16, 2: B bf16, 3: both
      for (int t = 0; t < 4; ++t) {
        const bool ta = t & 1, tb = t & 2;
        const float beta = t == 3 ? 0.5f : 0.0f;
        SCOPED_TRACE(cat(s.M, "x", s.N, "x", s.K, " bf16 ", which, " ta ", ta, " tb ", tb));
        const Tensor a = rounded(random_tensor({s.M * std::max<int64_t>(s.K, 1)}, ++seed));
        const Tensor b = rounded(random_tensor({s.N * std::max<int64_t>(s.K, 1)}, ++seed));
        const Tensor ha = a.converted(DType::BF16), hb = b.converted(DType::BF16);
        const std::vector<float> c0 = random_tensor({s.M * s.N}, ++seed).to_vector();
        GemmOperand ga{a.f32(), nullptr, std::max<int64_t>(1, ta ? s.M : s.K), ta};
        GemmOperand gb{b.f32(), nullptr, std::max<int64_t>(1, tb ? s.K : s.N), tb};
        if (which & 1) ga = {nullptr, ha.data<uint16_t>(), ga.ld, ta};
        if (which & 2) gb = {nullptr, hb.data<uint16_t>(), gb.ld, tb};
        std::vector<float> panels = c0, whole = c0;
        gemm_widening(s.M, s.N, s.K, ga, gb, panels.data(), s.N, beta);
        gemm_widening_reference(s.M, s.N, s.K, ga, gb, whole.data(), s.N, beta);
        std::vector<double> want, magnitude;
        loops(s.M, s.N, s.K, a, ta, b, tb, c0, beta, want, magnitude);
        for (size_t i = 0; i < want.size(); ++i) {
          const double tol = 1e-6 * magnitude[i] + 1e-7;
          ASSERT_LE(std::fabs(panels[i] - whole[i]), tol) << i;
          ASSERT_LE(std::fabs(panels[i] - want[i]), tol) << i;
        }
      }
}

// A graph of y = einsum(equation, x, w) and loss = sum(y * r), with w a
// weight held in bf16 or f32.
struct Product {
  Graph g;
  int y = -1, dx = -1, loss = -1;
  Value w;
  Product(const std::string& equation, const Shape& x_shape, const Shape& w_shape,
          const Shape& y_shape, bool bf16) {
    Value x = g.input("x", x_shape);
    w = g.parameter("w", w_shape, bf16 ? DType::BF16 : DType::F32);
    Value r = g.input("r", y_shape);
    Value out = ops::einsum(equation, x, w);
    Value l = ops::sum_to(out * r, {});
    y = out.id;
    loss = l.id;
    dx = gradients(l, {x})[0].id;
  }
  std::vector<Tensor> run(const Tensor& x, const Tensor& w, const Tensor& r) const {
    return testing::evaluate(g, {{"x", x}, {"w", w}, {"r", r}}, {y, dx});
  }
};

// Forward and dX = dY W^T over a bf16 weight equal the f32 product over the
// same (rounded) values: matrix layouts with the weight either side and
// transposed, and a layout that is no matrix (copied whole, widened).
TEST(Bf16Weights, ProductAndInputGradientEqualTheF32ProductOverRoundedWeights) {
  struct Case {
    std::string equation;
    Shape x, w, y;
  };
  const std::vector<Case> cases = {
      {"btc,kgdc->btkgd", {2, 5, 7}, {3, 2, 5, 7}, {2, 5, 3, 2, 5}},  // q_proj, Llama's layout
      {"btkd,ckd->btc", {3, 4, 2, 5}, {9, 2, 5}, {3, 4, 9}},          // o_proj
      {"btc,vc->btv", {1, 7, 11}, {131, 11}, {1, 7, 131}},            // a tied head
      {"btc,cd->btd", {2, 3, 1}, {1, 13}, {2, 3, 13}},                // a Dense of width 1
      {"btc,dce->btde", {2, 3, 4}, {5, 4, 3}, {2, 3, 5, 3}}};         // no matrix: copied
  uint64_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.equation);
    const Tensor x = random_tensor(c.x, ++seed), r = random_tensor(c.y, ++seed);
    const Tensor w = rounded(random_tensor(c.w, ++seed));
    const Product held(c.equation, c.x, c.w, c.y, true), plain(c.equation, c.x, c.w, c.y, false);
    const std::vector<Tensor> got = held.run(x, w.converted(DType::BF16), r);
    const std::vector<Tensor> want = plain.run(x, w, r);
    EXPECT_LE(max_relative_error(got[0], want[0]), 1e-6);
    EXPECT_LE(max_relative_error(got[1], want[1]), 1e-6);
    // The held graph has no gradient of the weight, and refuses one.
    for (int id = 0; id < held.g.size(); ++id)
      EXPECT_FALSE(held.g.node(id).op == Op::Einsum && held.g.node(id).shape == c.w);
    Graph& g = const_cast<Graph&>(held.g);
    const std::string e = error_of([&] { gradients(g.value(held.loss), {held.w}); });
    EXPECT_NE(e.find("weight 'w' is held in bf16, which takes no gradient"), std::string::npos)
        << e;
  }
}

TEST(Bf16Weights, GatherWidensTheRowsOfABf16Table) {
  Graph g;
  Value table = g.parameter("table", {7, 5}, DType::BF16);
  Value ids = g.input("ids", {2, 3}, DType::I32);
  Value rows = ops::gather(table, ids);
  EXPECT_EQ(rows.dtype(), DType::F32);
  const Tensor t = rounded(random_tensor({7, 5}, 3));
  const Tensor i =
      Tensor::from({2, 3}, std::span<const int32_t>(std::vector<int32_t>{6, 0, 3, 3, 1, 2}));
  const Tensor out =
      testing::evaluate(g, {{"table", t.converted(DType::BF16)}, {"ids", i}}, {rows.id})[0];
  for (int64_t k = 0; k < 6; ++k)
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(out.f32()[k * 5 + j], t.f32()[i.i32()[k] * 5 + j]);
}

TEST(Bf16Weights, AnOpThatReadsF32RefusesABf16WeightNamingIt) {
  Graph g;
  Value w = g.parameter("h.0.norm.scale", {4}, DType::BF16);
  Value x = g.input("x", {2, 4});
  const std::string e = error_of([&] { (void)(x * w); });
  EXPECT_NE(e.find("op mul cannot read 'h.0.norm.scale', which is held in bf16"), std::string::npos)
      << e;
  // A weight that only products read can be held so; one an add reads cannot.
  Graph h;
  Value a = h.parameter("a", {4, 3}), b = h.parameter("b", {3});
  Value y = ops::einsum("bc,cd->bd", h.input("x", {2, 4}), a) + b;
  (void)y;
  EXPECT_TRUE(h.can_hold_in_bf16(a.id));
  EXPECT_FALSE(h.can_hold_in_bf16(b.id));
  h.hold_in_bf16(a.id);
  EXPECT_EQ(h.node(a.id).dtype, DType::BF16);
  EXPECT_EQ(h.node(a.id).leaf().dtype, DType::BF16);
}

// A bf16 weight laid out otherwise than its product reads it: the
// partitioner slices, gathers or moves its split (all-to-all) in bf16,
// uneven blocks included, and the product equals one device's.
TEST(Bf16Weights, AWeightLaidOutAnewKeepsItsValues) {
  const DeviceMesh mesh({3}, {"model"});
  const Sharding none{{-1, -1}, {}}, rows{{0, -1}, {}}, cols{{-1, 0}, {}};
  struct Case {
    Sharding from, to, x, out;
    const char* collective;
  };
  const std::vector<Case> cases = {{rows, none, none, none, "all_gather"},
                                   {rows, cols, none, cols, "all_to_all"},
                                   {none, cols, none, cols, ""},  // a local slice
                                   {cols, rows, cols, Sharding{{-1, -1}, {0}}, "all_to_all"}};
  const Tensor x = random_tensor({4, 7}, 1), w = rounded(random_tensor({7, 5}, 2));
  Graph one;
  Value y1 = ops::einsum("bc,cd->bd", one.input("x", {4, 7}), one.parameter("w", {7, 5}));
  const Tensor want = testing::evaluate(one, {{"x", x}, {"w", w}}, {y1.id})[0];
  for (const Case& c : cases) {
    const std::string what = c.from.to_string(mesh) + " -> " + c.to.to_string(mesh);
    Graph g;
    Value xv = g.input("x", {4, 7}), wv = g.parameter("w", {7, 5}, DType::BF16);
    Value y = ops::einsum("bc,cd->bd", xv, wv);
    PartitionRequest r;
    r.leaves[xv.id] = c.x;
    r.leaves[wv.id] = c.from;
    r.decisions[y.id] = {{c.x, c.to}, c.out};
    ShardedExecutor exec(g, mesh, r, {y.id});
    const Tensor held = w.converted(DType::BF16);
    for (int d = 0; d < mesh.size(); ++d) {
      exec.bind(d, xv.id, block_of(x, c.x, mesh, d));
      exec.bind(d, wv.id, block_of(held, c.from, mesh, d));
    }
    exec.run();
    EXPECT_LE(max_relative_error(exec.output(0), want), 1e-6) << what;
    if (*c.collective) {
      bool ran = false;
      for (const CollectiveRecord& rec : exec.partition().collectives)
        ran |= rec.kind == c.collective;
      EXPECT_TRUE(ran) << what;
    }
  }
}

// A weight held in bf16 is read from its source in bands of rows (never a
// whole f32 block of more than 16 MiB): the values are the whole block's,
// rounded, on one device and with either dimension split (a band inside a
// split: nested).
TEST(Bf16Weights, ASourceIsReadInBandsOfRowsIntoTheSameBlock) {
  const Shape shape{4099, 2051};  // 33.6 MB of f32
  const Tensor whole = random_tensor(shape, 9), held = whole.converted(DType::BF16);
  struct Case {
    DeviceMesh mesh;
    Sharding layout;
    int min_reads;
  };
  const std::vector<Case> cases = {{DeviceMesh(), Sharding{{-1, -1}, {}}, 3},
                                   {DeviceMesh({2}, {"model"}), Sharding{{0, -1}, {}}, 4},
                                   {DeviceMesh({2}, {"model"}), Sharding{{-1, 0}, {}}, 4}};
  for (const Case& c : cases) {
    const std::string what = c.layout.to_string(c.mesh);
    int reads = 0;
    int64_t largest = 0;
    WeightSource src;
    src.check = [](const std::string&, const Shape&) {};
    src.read = [&](const Shape&, const Sharding& layout, const DeviceMesh& mesh, int device) {
      ++reads;
      Tensor block = block_of(whole, layout, mesh, device);
      largest = std::max<int64_t>(largest, int64_t(block.nbytes()));
      return block;
    };
    WeightStore store;
    store.declare({"w", ""}, shape, std::nullopt, DType::BF16);
    std::vector<int> devices(size_t(c.mesh.size()));
    for (int d = 0; d < c.mesh.size(); ++d) devices[size_t(d)] = d;
    store.place_on(c.mesh, devices);
    store.load({{{"w", ""}, src}});
    for (int d = 0; d < c.mesh.size(); ++d) {
      const Tensor& got = store.block({"w", ""}, c.layout, d);
      const Tensor want = block_of(held, c.layout, c.mesh, d);
      ASSERT_EQ(got.dtype(), DType::BF16) << what;
      ASSERT_EQ(got.shape(), want.shape()) << what;
      EXPECT_EQ(std::memcmp(got.raw(), want.raw(), want.nbytes()), 0) << what << " device " << d;
    }
    EXPECT_GE(reads, c.min_reads) << what;
    EXPECT_LE(largest, int64_t{16} << 20) << what;
  }
}

// ---- LoRA on a Llama whose frozen base is held in bf16 ----

LlamaConfig lora_llama(bool tied) {
  LlamaConfig c = llama_config_of(kTestData + "/hf_llama");
  c.lora_rank = 2;
  c.lora_alpha = 4;
  c.tie_word_embeddings = tied;
  return c;
}

constexpr int64_t kSeq = 6, kBatch = 4;

std::unique_ptr<Llama> make_llama(bool tied, bool bf16, const char* mesh) {
  const LlamaConfig c = lora_llama(tied);
  auto m = std::make_unique<Llama>(c, kSeq, /*seed=*/5);
  if (std::string(mesh).size())
    m->set_distribution(
        std::make_shared<ModelParallel>(DeviceMesh::parse(mesh), llama_megatron_layout(c)));
  m->hold_frozen_weights_in_bf16(bf16);
  m->compile(Adam({.learning_rate = 0.05}), losses::sparse_categorical_crossentropy);
  return m;
}

struct Trained {
  std::vector<double> losses;
  std::map<std::string, Tensor> adapters;
};

Trained train(Model& m) {
  Trained t;
  for (int step = 0; step < 3; ++step) {
    const Tensor x = testing::random_ids({kBatch, kSeq}, 131, 40 + step);
    const Tensor y = testing::random_ids({kBatch, kSeq}, 131, 50 + step);
    t.losses.push_back(m.train_on_batch(x, y));
  }
  for (const std::string& p : m.weight_paths())
    if (p.find("lora_kernel") != std::string::npos) t.adapters[p] = m.gather_weight(p);
  return t;
}

// Losses to `tol`; adapters to `adapter_tol`: Adam divides by the root of
// the small second moments of a's first steps (b starts at zeros), which
// magnifies the last bits of a sum taken in another order (an f32 model
// sharded differs from one device by 4e-5 to 1e-4 here too).
void expect_same(const Trained& a, const Trained& b, double tol, double adapter_tol) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], tol * std::fabs(b.losses[i])) << "step " << i;
  ASSERT_EQ(a.adapters.size(), b.adapters.size());
  for (const auto& [p, w] : b.adapters)
    EXPECT_LE(max_relative_error(a.adapters.at(p), w), adapter_tol) << p;
}

class LoraBf16Base : public ::testing::TestWithParam<bool> {};  // tied embeddings

// The bf16 base trains as the f32 model whose base weights were rounded to
// bf16 first (the same numbers, so to the last bits but for BLAS's order of
// summing); the adapters move; the base is held in half the bytes.
TEST_P(LoraBf16Base, EqualsTheF32ModelOverRoundedBaseWeightsInHalfTheBytes) {
  const bool tied = GetParam();
  std::unique_ptr<Llama> held = make_llama(tied, true, ""), plain = make_llama(tied, false, "");
  int64_t held_elements = 0, f32_elements = 0;
  for (const std::string& p : held->weight_paths()) {
    const int64_t n = numel(held->gather_weight(p).shape());
    if (held->weight_dtype(p) == DType::BF16) {
      held_elements += n;
      plain->set_weight(p, rounded(plain->gather_weight(p)));
      EXPECT_EQ(p.find("lora_kernel"), std::string::npos) << p;
    } else {
      f32_elements += n;
    }
  }
  // Every projection kernel (and the head or tied table) is held; the
  // adapters and norms are not.
  for (const char* p : {"layers.0.self_attn.q_proj.kernel", "layers.1.self_attn.v_proj.kernel",
                        "layers.1.mlp.down_proj.kernel", "embed_tokens.embeddings"})
    EXPECT_EQ(held->weight_dtype(p), DType::BF16) << p;
  if (!tied) {
    EXPECT_EQ(held->weight_dtype("lm_head.kernel"), DType::BF16);
  }
  for (const char* p :
       {"layers.0.self_attn.q_proj.lora_kernel_a", "layers.0.input_layernorm.gamma", "norm.gamma"})
    EXPECT_EQ(held->weight_dtype(p), DType::F32) << p;
  const Trained a = train(*held), b = train(*plain);
  expect_same(a, b, 2e-5, 2e-5);
  EXPECT_GT(
      max_abs_diff(a.adapters.at("layers.0.self_attn.q_proj.lora_kernel_b"), Tensor::zeros({2, 6})),
      0);
  EXPECT_EQ(held->weight_bytes(), 2 * held_elements + 4 * f32_elements);
  EXPECT_EQ(plain->weight_bytes(), 4 * (held_elements + f32_elements));
  EXPECT_GT(held_elements, 4 * f32_elements);  // the base is most of the model
  // Off again: widened back with the rounded values, and training goes on.
  const std::string q = "layers.0.self_attn.q_proj.kernel";
  const Tensor before = held->gather_weight(q);
  held->hold_frozen_weights_in_bf16(false);
  EXPECT_EQ(held->weight_dtype(q), DType::F32);
  EXPECT_EQ(max_abs_diff(held->gather_weight(q), before), 0);
  const Tensor x = testing::random_ids({kBatch, kSeq}, 131, 60);
  EXPECT_NEAR(held->train_on_batch(x, x), plain->train_on_batch(x, x), 1e-4);
  EXPECT_EQ(held->weight_bytes(), 4 * (held_elements + f32_elements));
}

// Sharded (Megatron's layout: the projections split over `model`, whose
// blocks are then half-size bf16 shards) equals one device.
TEST_P(LoraBf16Base, ShardedEqualsOneDevice) {
  const bool tied = GetParam();
  std::unique_ptr<Llama> one = make_llama(tied, true, "");
  const Trained want = train(*one);
  for (const char* mesh : {"model=2", "data=2,model=2", "model=3"}) {
    SCOPED_TRACE(mesh);
    std::unique_ptr<Llama> m = make_llama(tied, true, mesh);
    expect_same(train(*m), want, 2e-5, 5e-4);
    // Every device holds its block of each weight, 2 bytes an element for
    // the held ones (the projections' blocks are their shards).
    const Distribution& d = *m->distribution_strategy();
    int64_t want_bytes = 0;
    for (const std::string& p : m->weight_paths()) {
      const Shape shape = one->gather_weight(p).shape();
      EXPECT_EQ(m->weight_dtype(p), one->weight_dtype(p)) << p;
      const Sharding layout = d.weight_layout(p, shape);
      for (int device = 0; device < d.mesh().size(); ++device)
        want_bytes += numel(layout.local_shape(shape, d.mesh(), device)) *
                      int64_t(dtype_size(m->weight_dtype(p)));
    }
    EXPECT_EQ(m->weight_bytes(), want_bytes);
    EXPECT_TRUE(d.weight_layout("layers.0.self_attn.q_proj.kernel", {2, 3, 6, 24}).dims[0] >= 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Tied, LoraBf16Base, ::testing::Bool());

}  // namespace bf16_weights_test
}  // namespace autoshard
