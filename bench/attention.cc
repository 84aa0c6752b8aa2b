// The fused attention op against the graph it replaces (einsum, scale,
// causal softmax, einsum), forward and the gradients of q, k and v, on
// GPT-2 124M's heads (12 of 64) at sequence lengths 16 to 1024 with the
// tokens of a batch fixed: where MultiHeadAttention's choice between the two
// (kFusedAttentionScores, src/nn/layers.cc) should lie. Each row is the best
// of `--repeats` runs of one executor, so the arena, the weights' caches and
// the thread pool are warm, as they are in a training step.
//
//   bench_attention [--tokens 256] [--repeats 20]
// Prints a readable table on stderr and a JSON object on stdout.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/blas_core.h"
#include "autoshard/ir/ops.h"
#include "autoshard/runtime/executor.h"

using namespace autoshard;

namespace {

constexpr int64_t kHeads = 12, kHeadDim = 64;

Tensor filled(const Shape& s, float scale) {
  Tensor t(s);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * std::sin(0.37f * float(i));
  return t;
}

// Milliseconds of one forward and backward pass at batch b, length t.
double best_ms(int64_t b, int64_t t, bool fused, int repeats) {
  Graph g;
  const Shape shape{b, t, kHeads, kHeadDim};
  Value q = g.parameter("q", shape), k = g.parameter("k", shape), v = g.parameter("v", shape);
  Value w = g.parameter("w", shape);
  const double scale = 1.0 / std::sqrt(double(kHeadDim));
  Value out =
      fused ? ops::attention(q, k, v, /*causal=*/true, scale)
            : ops::einsum("bhqk,bkhd->bqhd",
                          ops::softmax(ops::scale(ops::einsum("bqhd,bkhd->bhqk", q, k), scale),
                                       /*causal=*/true),
                          v);
  Value loss = ops::reduce_sum(out * w, {0, 1, 2, 3});
  std::vector<Value> grads = gradients(loss, {q, k, v});
  Executor e(g, {grads[0].id, grads[1].id, grads[2].id});
  const Tensor tq = filled(shape, 1.5f), tk = filled(shape, 1.2f), tv = filled(shape, 1.0f),
               tw = filled(shape, 0.5f);
  e.bind(q.id, tq), e.bind(k.id, tk), e.bind(v.id, tv), e.bind(w.id, tw);
  e.run();  // the arena is made on the first run
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    e.run();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  blas::use_best_blas_kernels(argv);
  int64_t tokens = 256;
  int repeats = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokens")
      tokens = std::stoll(argv[i + 1]);
    else if (a == "--repeats")
      repeats = std::stoi(argv[i + 1]);
  }
  nlohmann::json rows = nlohmann::json::array();
  std::fprintf(stderr,
               "causal attention, %lld heads of %lld, %lld tokens a batch: forward and backward\n",
               static_cast<long long>(kHeads), static_cast<long long>(kHeadDim),
               static_cast<long long>(tokens));
  std::fprintf(stderr, "%6s %6s %12s %12s %8s\n", "batch", "length", "fused ms", "unfused ms",
               "speed-up");
  for (int64_t t = 16; t <= std::max<int64_t>(tokens, 16); t *= 2) {
    const int64_t b = std::max<int64_t>(1, tokens / t);
    const double fused = best_ms(b, t, true, repeats), unfused = best_ms(b, t, false, repeats);
    std::fprintf(stderr, "%6lld %6lld %12.3f %12.3f %7.2fx\n", static_cast<long long>(b),
                 static_cast<long long>(t), fused, unfused, unfused / fused);
    rows.push_back({{"batch", b}, {"length", t}, {"fused_ms", fused}, {"unfused_ms", unfused}});
  }
  std::printf("%s\n", nlohmann::json{{"bench", "attention"}, {"rows", rows}}.dump().c_str());
}
