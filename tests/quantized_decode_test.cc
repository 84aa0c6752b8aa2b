// Decoding over bf16 and int8 weights: the vectorised matrix-vector kernels
// (f32's too) against their plain loops on odd sizes, the formats' rounding
// bounds, the compact copies a tensor's storage holds and the sgemm and
// QuantizedEinsum paths that read them in one-row products, the generation
// graph that holds them, greedy tokens
// equal on every mesh (the Llama fixture and GPT-2's test preset), and the
// CLI flag.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/ops.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/nn/generation.h"
#include "autoshard/plan/distribution.h"
#include "autoshard/runtime/executor.h"
#include "cli_runner.h"
#include "ir/op_def.h"
#include "ir/ops/gemm.h"
#include "ir/ops/quantized_gemv.h"
#include "tensor/quantize.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kTestData;

// A random matrix of `outputs` x `inner` in `dtype` (int8 codes with
// per-output scales), laid out either way.
QuantizedMatrix random_matrix(WeightsDType dtype, int64_t outputs, int64_t inner,
                              bool outputs_first, uint64_t seed) {
  const Tensor w = testing::random_tensor({outputs * inner}, seed);
  QuantizedMatrix m;
  m.dtype = dtype;
  m.outputs = outputs;
  m.inner = inner;
  m.outputs_first = outputs_first;
  if (dtype == WeightsDType::BF16) {
    for (int64_t i = 0; i < w.numel(); ++i) m.bf16.push_back(bf16_round(w.f32()[i]));
    return m;
  }
  for (int64_t i = 0; i < w.numel(); ++i)
    m.codes.push_back(static_cast<int8_t>(std::lround(w.f32()[i] * 127)));
  for (int64_t o = 0; o < outputs; ++o) m.scales.push_back(0.01f + 0.001f * float(o % 7));
  return m;
}

// sum_i |W[o, i] x[i]|: the scale a float sum's rounding error is relative to.
std::vector<double> magnitudes(const QuantizedMatrix& m, const float* x) {
  std::vector<double> s(size_t(m.outputs), 0);
  for (int64_t o = 0; o < m.outputs; ++o)
    for (int64_t i = 0; i < m.inner; ++i) {
      const int64_t at = m.outputs_first ? o * m.inner + i : i * m.outputs + o;
      const double w = m.dtype == WeightsDType::BF16 ? bf16_widen(m.bf16[at])
                                                     : double(m.codes[at]) * double(m.scales[o]);
      s[o] += std::fabs(w * double(x[i]));
    }
  return s;
}

// What rounding x to 16-bit fixed point in blocks of 64 (the int8 [o, i]
// kernel with VNNI) may add to output o: each element of a whole block moves
// by at most half a step, 2^-16 of the block's largest magnitude.
std::vector<double> fixed_point_bounds(const QuantizedMatrix& m, const float* x) {
  std::vector<double> bound(size_t(m.outputs), 0);
  if (m.dtype != WeightsDType::Int8 || !m.outputs_first) return bound;
  for (int64_t b = 0; (b + 1) * 64 <= m.inner; ++b) {
    double largest = 0;
    for (int64_t i = b * 64; i < (b + 1) * 64; ++i)
      largest = std::max(largest, std::fabs(double(x[i])));
    const double step = largest / 32767;
    for (int64_t o = 0; o < m.outputs; ++o)
      for (int64_t i = b * 64; i < (b + 1) * 64; ++i)
        bound[size_t(o)] += 0.5 * step * std::fabs(double(m.codes[o * m.inner + i]) * m.scales[o]);
  }
  return bound;
}

// The fast kernels agree with the plain loops (exact f32 x, one double sum)
// to 1e-6 of each output's sum of magnitudes plus what x's fixed-point
// rounding may move it (not bit-exact: the kernels sum in lanes, blocks or
// four rows at a time), on sizes that fill no vector evenly, and with
// x's magnitudes spread over nine decades inside a block.
TEST(QuantizedGemv, FastKernelsMatchThePlainLoops) {
  for (WeightsDType dtype : {WeightsDType::BF16, WeightsDType::Int8})
    for (bool outputs_first : {true, false})
      for (int64_t outputs : {0, 1, 2, 3, 37, 131, 517, 1100})
        for (int64_t inner : {1, 2, 3, 31, 67, 128, 200, 1000}) {
          SCOPED_TRACE(std::string(weights_dtype_name(dtype)) +
                       (outputs_first ? " [o,i] " : " [i,o] ") + std::to_string(outputs) + "x" +
                       std::to_string(inner));
          const QuantizedMatrix m = random_matrix(dtype, outputs, inner, outputs_first, 7);
          Tensor x = testing::random_tensor({inner}, 9);
          for (int64_t i = 0; i < inner; i += 5) x.f32()[i] *= std::pow(10.0f, float(i % 9) - 4);
          std::vector<float> fast(static_cast<size_t>(outputs)), plain(fast.size());
          quantized_gemv(m, x.f32(), fast.data());
          quantized_gemv_reference(m, x.f32(), plain.data());
          const std::vector<double> mag = magnitudes(m, x.f32());
          const std::vector<double> rounding = fixed_point_bounds(m, x.f32());
          for (int64_t o = 0; o < outputs; ++o)
            ASSERT_LE(std::fabs(double(fast[o]) - double(plain[o])),
                      1e-6 * mag[o] + rounding[o] + 1e-30)
                << "output " << o;
        }
}

// A NaN or an infinity in the input reaches the outputs as in f32 (the
// int8 kernel's fixed-point input has neither, so it falls back to f32).
TEST(QuantizedGemv, NonFiniteInputsPropagate) {
  for (WeightsDType dtype : {WeightsDType::BF16, WeightsDType::Int8})
    for (bool outputs_first : {true, false})
      for (float bad : {NAN, INFINITY}) {
        const QuantizedMatrix m = random_matrix(dtype, 9, 200, outputs_first, 7);
        Tensor x = testing::random_tensor({200}, 9);
        x.f32()[100] = bad;
        std::vector<float> fast(9), plain(9);
        quantized_gemv(m, x.f32(), fast.data());
        quantized_gemv_reference(m, x.f32(), plain.data());
        for (int o = 0; o < 9; ++o) {
          EXPECT_FALSE(std::isfinite(fast[o])) << "output " << o;
          EXPECT_EQ(std::isnan(fast[o]), std::isnan(plain[o])) << "output " << o;
        }
      }
}

// bf16 keeps 8 significant bits (relative error at most 2^-8); int8 codes
// are within half a step of the value; -127..127 only, zeros stay zero.
TEST(QuantizedGemv, RoundTripErrorBounds) {
  const Tensor w = testing::random_tensor({4096}, 3, 5.0f);
  float max_abs = 0;
  for (int64_t i = 0; i < w.numel(); ++i) max_abs = std::max(max_abs, std::fabs(w.f32()[i]));
  const float scale = int8_scale(max_abs);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float v = w.f32()[i];
    EXPECT_LE(std::fabs(bf16_widen(bf16_round(v)) - v), std::ldexp(std::fabs(v), -8));
    const int8_t c = int8_code(v, scale);
    EXPECT_GE(c, -127);
    EXPECT_LE(std::fabs(int8_value(c, scale) - v), 0.5f * scale * (1 + 1e-6f));
  }
  EXPECT_EQ(int8_code(max_abs, scale), 127);
  EXPECT_EQ(int8_code(-max_abs, scale), -127);
  EXPECT_EQ(int8_code(3.0f, 0.0f), 0);  // an all-zero channel
  EXPECT_EQ(bf16_round(1.0f), 0x3f80);
  EXPECT_EQ(bf16_round(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // a tie goes to even
  EXPECT_EQ(bf16_round(std::bit_cast<float>(0x3f818000u)), 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_widen(bf16_round(NAN))));
  EXPECT_EQ(bf16_widen(bf16_round(INFINITY)), INFINITY);
}

// sgemm's one-row and one-column products over a matrix handed with its
// compact copy read the copy (alpha, beta and strides included); without
// one, or seen with another shape, the matrix stays on the f32 path.
TEST(QuantizedGemv, SgemmReadsTheCompactCopyItIsHanded) {
  const int64_t K = 45, N = 29;
  for (bool outputs_first : {true, false}) {
    const QuantizedMatrix m = random_matrix(WeightsDType::Int8, N, K, outputs_first, 11);
    Tensor block({outputs_first ? N : K, outputs_first ? K : N});
    for (int64_t o = 0; o < N; ++o)
      for (int64_t i = 0; i < K; ++i) {
        const int64_t at = outputs_first ? o * K + i : i * N + o;
        block.f32()[at] = int8_value(m.codes[at], m.scales[o]);
      }
    const Tensor x = testing::random_tensor({K}, 13);
    std::vector<float> blas(N, 1.0f), ours(N, 1.0f), col(2 * N, 1.0f);
    const int64_t ld = outputs_first ? K : N;
    // C[1, N] = 2 x op(W) + 0.5 C on f32, then on the compact copy.
    sgemm(false, outputs_first, 1, N, K, x.f32(), K, block.f32(), ld, blas.data(), N, 2.0f, 0.5f);
    const int64_t calls = quantized_gemv_calls();
    sgemm(false, outputs_first, 1, N, K, x.f32(), K, block.f32(), ld, ours.data(), N, 2.0f, 0.5f,
          INT_MAX, {.b = &m});
    EXPECT_EQ(quantized_gemv_calls(), calls + 1);
    EXPECT_LT(max_relative_error(Tensor::from({N}, ours), Tensor::from({N}, blas)), 1e-5);
    // C[N, 1] (stride 2) = op(W) x: the weight as the first operand.
    sgemm(!outputs_first, false, N, 1, K, block.f32(), ld, x.f32(), 1, col.data(), 2, 1.0f, 0.0f,
          INT_MAX, {.a = &m});
    EXPECT_EQ(quantized_gemv_calls(), calls + 2);
    for (int64_t o = 0; o < N; ++o) EXPECT_NEAR(col[2 * o], (blas[o] - 0.5f) / 2, 1e-4);
    // The copy of the other operand is not read.
    std::vector<float> f32(N, 1.0f);
    sgemm(false, outputs_first, 1, N, K, x.f32(), K, block.f32(), ld, f32.data(), N, 2.0f, 0.5f,
          INT_MAX, {.a = &m});
    EXPECT_EQ(quantized_gemv_calls(), calls + 2);
    EXPECT_EQ(f32, blas);
    // Another shape over the same matrix is not this copy.
    sgemm(false, outputs_first, 1, N - 1, K, x.f32(), K, block.f32(), ld, ours.data(), N, 1.0f,
          0.0f, INT_MAX, {.b = &m});
    EXPECT_EQ(quantized_gemv_calls(), calls + 2);
  }
}

// A tensor's compact copy is its storage's: copies and reshapes see it, a
// clone does not. Only a QuantizedEinsum reads it (ops::einsum makes one
// over a weight the graph holds in a compact format, Graph::hold_weights),
// in its one-row products, agreeing with the plain einsum over the f32
// values (the reference); a plain einsum over the same storage never reads it.
TEST(QuantizedGemv, OnlyAQuantizedEinsumReadsTheCompactCopy) {
  const int64_t K = 40, N = 24;
  auto m = std::make_shared<QuantizedMatrix>(
      random_matrix(WeightsDType::Int8, N, K, /*outputs_first=*/false, 5));
  Tensor w({K, N});
  for (int64_t i = 0; i < K * N; ++i) w.f32()[i] = int8_value(m->codes[i], m->scales[i % N]);
  const Tensor shared = w;
  w.set_quantized(m);
  EXPECT_EQ(shared.quantized(), m.get());
  EXPECT_EQ(w.reshaped({K * N}).quantized(), m.get());
  EXPECT_EQ(w.clone().quantized(), nullptr);
  for (int64_t rows : {1, 3}) {
    SCOPED_TRACE(std::to_string(rows) + " rows");
    Graph held, plain;
    held.hold_weights({{"w", WeightsDType::Int8}});
    const Value hy =
        ops::einsum("btc,cd->btd", held.input("x", {1, rows, K}), held.parameter("w", {K, N}));
    const Value py =
        ops::einsum("btc,cd->btd", plain.input("x", {1, rows, K}), plain.parameter("w", {K, N}));
    ASSERT_EQ(hy.node().op, Op::QuantizedEinsum);
    EXPECT_EQ(hy.node().attr<EinsumAttrs>().compact_operand, 1);
    EXPECT_EQ(held.node(held.find_parameter("w")).leaf().format, WeightsDType::Int8);
    ASSERT_EQ(py.node().op, Op::Einsum);
    const Tensor x = testing::random_tensor({1, rows, K}, 3);
    Executor hx(held, {hy.id}), px(plain, {py.id});
    hx.bind(held.find_input("x"), x);
    hx.bind(held.find_parameter("w"), w);
    px.bind(plain.find_input("x"), x);
    px.bind(plain.find_parameter("w"), w);
    const int64_t calls = quantized_gemv_calls();
    px.run({1, 0});
    EXPECT_EQ(quantized_gemv_calls(), calls);
    hx.run({1, 0});
    EXPECT_EQ(quantized_gemv_calls(), calls + (rows == 1 ? 1 : 0));
    EXPECT_LT(max_relative_error(hx.value(hy.id), px.value(py.id)), 1e-5);
  }
}

// A held weight's products are priced at its format's bytes in one-row
// products (f32's otherwise) and take no gradient: one line naming the
// weight and the fix.
TEST(QuantizedGemv, QuantizedEinsumCostAndGradient) {
  const int64_t K = 64, N = 32;
  Graph g;
  g.hold_weights({{"w", WeightsDType::Int8}});
  const Value x = g.parameter("x", {1, 1, K});
  const Value y = ops::einsum("btc,cd->btd", x, g.parameter("w", {K, N}));
  const Value z = ops::einsum("btc,cd->btd", x, g.parameter("v", {K, N}));
  const std::vector<Shape> in{{1, 1, K}, {K, N}};
  const OpCost held = op_def(Op::QuantizedEinsum).cost(y.node(), {in, y.shape()});
  const OpCost f32 = op_def(Op::Einsum).cost(z.node(), {in, z.shape()});
  EXPECT_EQ(held.flops, f32.flops);
  EXPECT_DOUBLE_EQ(f32.bytes - held.bytes, 3.0 * K * N - 4.0 * N);  // codes + a scale per output
  const std::vector<Shape> prefill{{1, 5, K}, {K, N}};
  EXPECT_EQ(op_def(Op::QuantizedEinsum).cost(y.node(), {prefill, {1, 5, N}}).bytes,
            op_def(Op::Einsum).cost(z.node(), {prefill, {1, 5, N}}).bytes);
  try {
    gradients(ops::reduce_sum(y, {0, 1, 2}), {x});
    FAIL() << "a held weight's product took a gradient";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight 'w' is held in int8"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("train on f32 weights"), std::string::npos) << e.what();
  }
}

// One-row f32 products (a decode step's over f32 weights and over the
// key-value cache) run on the same kernels, not BLAS's sgemv: against plain
// loops on odd sizes, in both layouts, as a block of a wider matrix (row
// stride above its width), with alpha, beta and x read with a stride.
TEST(QuantizedGemv, F32OneRowProductsMatchThePlainLoops) {
  for (bool trans_b : {true, false})
    for (int64_t n : {1, 3, 37, 517, 1100})
      for (int64_t k : {1, 31, 67, 200, 1000})
        for (bool trans_a : {false, true}) {
          SCOPED_TRACE(std::string(trans_b ? "[n,k] " : "[k,n] ") + std::to_string(n) + "x" +
                       std::to_string(k) + (trans_a ? " x strided" : ""));
          const int64_t ldb = (trans_b ? k : n) + 5, lda = trans_a ? 3 : k;
          const Tensor b = testing::random_tensor({(trans_b ? n : k) * ldb}, 3);
          const Tensor a = testing::random_tensor({k * lda}, 5);
          std::vector<float> c(size_t(n), 0.25f);
          sgemm(trans_a, trans_b, 1, n, k, a.f32(), lda, b.f32(), ldb, c.data(), n, 2.0f, 0.5f);
          for (int64_t o = 0; o < n; ++o) {
            double sum = 0, magnitude = 0;
            for (int64_t i = 0; i < k; ++i) {
              const double term = double(a.f32()[trans_a ? i * lda : i]) *
                                  double(b.f32()[trans_b ? o * ldb + i : i * ldb + o]);
              sum += term;
              magnitude += std::fabs(term);
            }
            ASSERT_LE(std::fabs(double(c[o]) - (2 * sum + 0.125)), 2e-6 * magnitude + 1e-6)
                << "output " << o;
          }
        }
}

std::shared_ptr<Distribution> distribution_for(const char* mesh, const LayoutMap& megatron) {
  if (std::string(mesh).empty()) return nullptr;
  return std::make_shared<ModelParallel>(DeviceMesh::parse(mesh), megatron);
}

const std::vector<const char*> kDecodeMeshes = {"", "model=2", "model=3", "data=2,model=2"};

// Greedy tokens of `make()`'s model under `dtype` on every mesh: the same
// ids, each run through the compact kernels.
template <typename Make>
void expect_same_tokens_on_every_mesh(Make make, WeightsDType dtype,
                                      const std::vector<int32_t>& prompt) {
  std::vector<int32_t> first;
  for (const char* mesh : kDecodeMeshes) {
    SCOPED_TRACE(std::string(weights_dtype_name(dtype)) + " on '" + mesh + "'");
    std::unique_ptr<Model> model = make(mesh);
    const QuantizedWeights q = quantize_weights(*model, dtype);
    const int64_t calls = quantized_gemv_calls();
    const Generation g = generate(*model, prompt, {.max_new_tokens = 8, .temperature = 0});
    EXPECT_GT(q.compact_blocks(), 0);
    EXPECT_GT(quantized_gemv_calls(), calls);  // decode read the compact copies
    if (first.empty())
      first = g.output_ids;
    else
      EXPECT_EQ(g.output_ids, first);
  }
}

TEST(QuantizedDecode, LlamaGreedyTokensAreTheSameOnEveryMesh) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  auto make = [&](const char* mesh) {
    auto model = std::make_unique<Llama>(config, 16);
    load_llama_weights(*model, kTestData + "/hf_llama");
    if (auto d = distribution_for(mesh, llama_megatron_layout(config))) model->set_distribution(d);
    return model;
  };
  for (WeightsDType dtype : {WeightsDType::BF16, WeightsDType::Int8})
    expect_same_tokens_on_every_mesh(make, dtype, {3, 17, 29, 5});
}

TEST(QuantizedDecode, Gpt2GreedyTokensAreTheSameOnEveryMesh) {
  const GPT2Config config = GPT2Config::preset("test");
  auto make = [&](const char* mesh) {
    auto model = std::make_unique<GPT2>(config, 16, 11);
    if (auto d = distribution_for(mesh, gpt2_megatron_layout())) model->set_distribution(d);
    return model;
  };
  for (WeightsDType dtype : {WeightsDType::BF16, WeightsDType::Int8})
    expect_same_tokens_on_every_mesh(make, dtype, {1, 2, 3});
}

// On one device a model that has run is rounded in place and decodes on
// its compact copies from the next step (bench/decode.cc times the formats
// in turns on one model so): the same tokens as a model rounded before its
// first step; with the copies dropped, or paused, no compact reads.
TEST(QuantizedDecode, OneDeviceRoundsAModelThatHasRun) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  const std::vector<int32_t> prompt{3, 17, 29, 5};
  const GenerationOptions greedy{.max_new_tokens = 6, .temperature = 0};
  Llama before(config, 16), after(config, 16);
  load_llama_weights(before, kTestData + "/hf_llama");
  load_llama_weights(after, kTestData + "/hf_llama");
  const QuantizedWeights early = quantize_weights(before, WeightsDType::Int8);
  const std::vector<int32_t> want = generate(before, prompt, greedy).output_ids;
  generate(after, prompt, greedy);  // f32
  {
    QuantizedWeights late = quantize_weights(after, WeightsDType::Int8);
    int64_t calls = quantized_gemv_calls();
    EXPECT_EQ(generate(after, prompt, greedy).output_ids, want);
    EXPECT_GT(quantized_gemv_calls(), calls);
    late.pause();
    calls = quantized_gemv_calls();
    generate(after, prompt, greedy);
    EXPECT_EQ(quantized_gemv_calls(), calls);
    late.resume();
    EXPECT_EQ(generate(after, prompt, greedy).output_ids, want);
    EXPECT_GT(quantized_gemv_calls(), calls);
  }
  const int64_t calls = quantized_gemv_calls();
  generate(after, prompt, greedy);
  EXPECT_EQ(quantized_gemv_calls(), calls);
}

// The rounded weights are what every path computes with: the cached
// steps' logits equal a full forward pass over the same rounded weights,
// and they differ from f32's by about the format's rounding.
TEST(QuantizedDecode, RoundedWeightsAreTheModelsWeights) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  Llama f32(config, 16);
  load_llama_weights(f32, kTestData + "/hf_llama");
  Llama model(config, 16);
  load_llama_weights(model, kTestData + "/hf_llama");
  const QuantizedWeights q = quantize_weights(model, WeightsDType::Int8);
  std::string path;  // the first block's down projection
  for (const auto& [name, w] : q.weights())
    if (path.empty() && name.ends_with("0.mlp.down_proj.kernel")) path = name;
  ASSERT_FALSE(path.empty()) << "weights: " << q.weights().size();
  const Tensor a = f32.gather_weight(path), b = model.gather_weight(path);
  const double err = max_relative_error(b, a);
  EXPECT_GT(err, 0);
  EXPECT_LT(err, 0.5 / 127 + 1e-6);
  EXPECT_EQ(q.weights().at(path).bytes, a.numel() + a.dim(0) * 4);  // codes + a scale per output
}

// The generation step's graph says which weights are held and how: every
// product over a rounded kernel is a QuantizedEinsum of its format while
// the QuantizedWeights is active, and a plain einsum again once paused.
TEST(QuantizedDecode, TheGenerationGraphHoldsTheWeights) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  Llama model(config, 16);
  load_llama_weights(model, kTestData + "/hf_llama");
  auto count = [&](Op op) {
    const Graph g = model.generation_graph(1, 1, 4);
    int n = 0, held = 0;
    for (int id = 0; id < g.size(); ++id) {
      n += g.node(id).op == op;
      held += g.node(id).is_weight() && g.node(id).leaf().format == WeightsDType::BF16;
    }
    return std::pair{n, held};
  };
  const int products = count(Op::Einsum).first;
  EXPECT_EQ(count(Op::QuantizedEinsum).first, 0);
  QuantizedWeights q = quantize_weights(model, WeightsDType::BF16);
  const auto [quantized, held] = count(Op::QuantizedEinsum);
  EXPECT_GT(quantized, 0);
  EXPECT_EQ(quantized + count(Op::Einsum).first, products);
  EXPECT_EQ(held, int(model.held_weights()->formats().size()));
  q.pause();
  EXPECT_EQ(count(Op::QuantizedEinsum).first, 0);
  q.resume();
  EXPECT_EQ(count(Op::QuantizedEinsum).first, quantized);
}

TEST(QuantizedDecode, BadWeightsDTypeIsOneErrorLine) {
  EXPECT_THROW(parse_weights_dtype("fp8", "--weights-dtype"), Error);
  const cli_runner::Result r = cli_runner::run("generate --model " + kTestData +
                                               "/hf_llama --prompt-ids 1,2 --max-new-tokens 2 "
                                               "--weights-dtype fp8");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(cli_runner::count(r.output, "autoshard: error: "), 1) << r.output;
  EXPECT_NE(r.output.find("--weights-dtype: 'fp8'"), std::string::npos) << r.output;
  const cli_runner::Result ok = cli_runner::run("generate --model " + kTestData +
                                                "/hf_llama --prompt-ids 1,2 --max-new-tokens 3 "
                                                "--weights-dtype int8 --mesh model=3 --json");
  EXPECT_EQ(ok.code, 0) << ok.output;
  EXPECT_NE(ok.output.find("\"output_ids\""), std::string::npos) << ok.output;
}

}  // namespace
}  // namespace autoshard
