// The recurrent layers' elementwise kernels, fast against the plain loops
// kept beside them (the kernels before the speed work), on the shapes of an
// LSTM(512) step at batch 32:
//   pad: a gate's crop [32, 2048] -> [32, 512] and a time step's crop
//        [64, 32, 2048] -> [1, 32, 2048], and ZeroPadding2D on [64, 32, 32, 64];
//   unary: sigmoid and its gradient on [32, 512], next to the Tanh op's loop;
//   conv: the ResNet benchmark's 3x3 convolutions (batch 64, 'same') in
//        GFLOP/s (the direct convolution's multiply-adds x 2 over the time),
//        forward and both gradients as the op runs them (Winograd F(2x2,
//        3x3) where it suits), the im2col + GEMM kernels
//        beside them, and one sgemm of the forward's shape (im2col's
//        column matrix already made);
//   depthwise: a 3x3 depthwise layer (batch 64, 32x32x128), its kernels
//        against the plain loops;
//   lstm: the recurrent products of an LSTM(512) step at batch 32 in
//        GFLOP/s, as the einsum op runs them (sgemm: tile_gemm for so few
//        rows), beside OpenBLAS on the same shape.
//
//   bench_keras_kernels [--repeats 200]
// Prints microseconds per call on stderr and a JSON object on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ir/ops/gemm.h"
#include "ir/ops/unary_kernels.h"
#include "ir/ops/vision_kernels.h"
#include "tensor/fast_math.h"

using namespace autoshard;

namespace {

template <typename F>
double best_us(int repeats, F f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 200;
  if (argc == 3 && std::string(argv[1]) == "--repeats") repeats = std::stoi(argv[2]);
  nlohmann::json out = nlohmann::json::object();
  auto row = [&](const std::string& name, double fast, double plain) {
    std::fprintf(stderr, "%-34s fast %9.1f us  plain %9.1f us  %6.1fx\n", name.c_str(), fast, plain,
                 plain / fast);
    out[name] = {{"fast_us", fast}, {"plain_us", plain}};
  };
  struct PadCase {
    std::string name;
    std::vector<int64_t> xs, ys, lo;
  };
  for (const PadCase& p : std::vector<PadCase>{
           {"pad: gate crop [32,2048]->[32,512]", {32, 2048}, {32, 512}, {0, -1024}},
           {"pad: step crop [64,32,2048]->[1,..]", {64, 32, 2048}, {1, 32, 2048}, {-17, 0, 0}},
           {"pad: ZeroPadding2D [64,32,32,64]",
            {64, 32, 32, 64},
            {64, 34, 34, 64},
            {0, 1, 1, 0}}}) {
    int64_t nx = 1, ny = 1;
    for (int64_t v : p.xs) nx *= v;
    for (int64_t v : p.ys) ny *= v;
    std::vector<float> x(nx, 1.0f), y(ny);
    const int reps = std::max<int>(3, int(repeats * 65536 / std::max<int64_t>(nx, 65536)));
    row(p.name, best_us(reps, [&] { pad_forward(p.xs, p.ys, p.lo, x.data(), y.data()); }),
        best_us(reps, [&] { pad_forward_reference(p.xs, p.ys, p.lo, x.data(), y.data()); }));
  }
  const int64_t n = 32 * 512;
  std::vector<float> x(n), dy(n, 1.0f), y(n);
  for (int64_t i = 0; i < n; ++i) x[i] = float(i % 97) / 10.0f - 4.8f;
  row("sigmoid [32,512]",
      best_us(repeats, [&] { unary_forward(UnaryFn::Sigmoid, 0, x.data(), y.data(), n); }),
      best_us(repeats,
              [&] { unary_forward_reference(UnaryFn::Sigmoid, 0, x.data(), y.data(), n); }));
  row("sigmoid gradient [32,512]",
      best_us(repeats,
              [&] { unary_backward(UnaryFn::Sigmoid, 0, x.data(), dy.data(), y.data(), n); }),
      best_us(repeats, [&] {
        unary_backward_reference(UnaryFn::Sigmoid, 0, x.data(), dy.data(), y.data(), n);
      }));
  const double tanh_us = best_us(repeats, [&] {
    for (int64_t i = 0; i < n; ++i) y[i] = fast_tanh(x[i]);
  });
  std::fprintf(stderr, "%-34s      %9.1f us (one thread)\n", "tanh op's loop [32,512]", tanh_us);
  out["tanh_loop_us"] = tanh_us;
  for (int64_t hw : {32, 16, 8, 4}) {
    const int64_t c = 64 * 32 / hw;
    ConvGeometry g;
    g.batch = 64, g.in_h = g.in_w = g.out_h = g.out_w = hw, g.k_h = g.k_w = 3;
    g.pad_h = g.pad_w = 1, g.cin = g.cout = g.group_in = g.group_out = c;
    std::vector<float> xs(size_t(64 * hw * hw * c), 0.5f), w(size_t(9 * c * c), 0.25f),
        ys(xs.size()), col(size_t(64 * hw * hw * 9 * c), 0.5f);
    const double flops = 2.0 * 64 * hw * hw * 9 * c * c;
    const int reps = 3;
    const double fwd = best_us(reps, [&] { conv_forward(g, 0, xs.data(), w.data(), ys.data()); });
    const double din =
        best_us(reps, [&] { conv_backward_input(g, 0, ys.data(), w.data(), xs.data()); });
    const double dw =
        best_us(reps, [&] { conv_backward_filter(g, 0, xs.data(), ys.data(), w.data()); });
    const double fwd_gemm =
        best_us(reps, [&] { conv_forward_gemm(g, 0, xs.data(), w.data(), ys.data()); });
    const double din_gemm =
        best_us(reps, [&] { conv_backward_input_gemm(g, 0, ys.data(), w.data(), xs.data()); });
    const double dw_gemm =
        best_us(reps, [&] { conv_backward_filter_gemm(g, 0, xs.data(), ys.data(), w.data()); });
    const double gemm = best_us(reps, [&] {
      sgemm(false, false, 64 * hw * hw, c, 9 * c, col.data(), 9 * c, w.data(), c, ys.data(), c);
    });
    const std::string name =
        "conv 3x3 " + std::to_string(hw) + "x" + std::to_string(hw) + "x" + std::to_string(c);
    std::fprintf(stderr,
                 "%-34s GFLOP/s: forward %5.1f (im2col %5.1f)  input grad %5.1f (im2col %5.1f)  "
                 "filter grad %5.1f (im2col %5.1f)  its sgemm alone %5.1f\n",
                 name.c_str(), flops / fwd * 1e-3, flops / fwd_gemm * 1e-3, flops / din * 1e-3,
                 flops / din_gemm * 1e-3, flops / dw * 1e-3, flops / dw_gemm * 1e-3,
                 flops / gemm * 1e-3);
    out[name] = {{"forward_gflops", flops / fwd * 1e-3},
                 {"forward_im2col_gflops", flops / fwd_gemm * 1e-3},
                 {"input_grad_gflops", flops / din * 1e-3},
                 {"input_grad_im2col_gflops", flops / din_gemm * 1e-3},
                 {"filter_grad_gflops", flops / dw * 1e-3},
                 {"filter_grad_im2col_gflops", flops / dw_gemm * 1e-3},
                 {"sgemm_gflops", flops / gemm * 1e-3}};
  }
  // A MobileNet-style 3x3 depthwise layer (batch 64, 32x32x128, same): the
  // op's kernels (ir/ops/depthwise.h) against the plain loops.
  {
    ConvGeometry g;
    g.batch = 64, g.in_h = g.in_w = g.out_h = g.out_w = 32, g.k_h = g.k_w = 3;
    g.pad_h = g.pad_w = 1, g.cin = g.cout = g.groups = 128, g.group_in = g.group_out = 1;
    std::vector<float> xs(size_t(64 * 32 * 32 * 128), 0.5f), w(size_t(9 * 128), 0.25f),
        ys(xs.size());
    const int reps = 3;
    auto pair = [&](const std::string& name, auto fast, auto plain) {
      row("depthwise 3x3 32x32x128 " + name, best_us(reps, fast), best_us(reps, plain));
    };
    pair(
        "forward", [&] { conv_forward(g, 0, xs.data(), w.data(), ys.data()); },
        [&] { conv_forward_reference(g, 0, xs.data(), w.data(), ys.data()); });
    pair(
        "input grad", [&] { conv_backward_input(g, 0, ys.data(), w.data(), xs.data()); },
        [&] { conv_backward_input_reference(g, 0, ys.data(), w.data(), xs.data()); });
    pair(
        "filter grad", [&] { conv_backward_filter(g, 0, xs.data(), ys.data(), w.data()); },
        [&] { conv_backward_filter_reference(g, 0, xs.data(), ys.data(), w.data()); });
  }
  // The recurrent products of one LSTM(512) time step at batch 32: the
  // forward h [32, 512] x W [512, 2048], and the input gradient
  // dgates [32, 2048] x W^T (W stored [512, 2048]).
  {
    const int64_t b = 32, u = 512, v = 2048;
    std::vector<float> h(size_t(b * u), 0.5f), w(size_t(u * v), 0.25f), g(size_t(b * v), 0.5f),
        out_v(size_t(b * v)), out_u(size_t(b * u));
    const double flops = 2.0 * b * u * v;
    const int reps = std::max(repeats, 20);
    auto rate = [&](auto f) { return flops / best_us(reps, f) * 1e-3; };
    const double fwd =
        rate([&] { sgemm(false, false, b, v, u, h.data(), u, w.data(), v, out_v.data(), v); });
    const double fwd_blas = rate([&] {
      parallel_blas_gemm(false, false, b, v, u, 1.0f, h.data(), u, w.data(), v, 0.0f, out_v.data(),
                         v);
    });
    const double grad =
        rate([&] { sgemm(false, true, b, u, v, g.data(), v, w.data(), v, out_u.data(), u); });
    const double grad_blas = rate([&] {
      parallel_blas_gemm(false, true, b, u, v, 1.0f, g.data(), v, w.data(), v, 0.0f, out_u.data(),
                         u);
    });
    std::fprintf(
        stderr,
        "%-34s GFLOP/s: forward %5.1f (OpenBLAS %5.1f)  input grad %5.1f (OpenBLAS %5.1f)\n",
        "lstm recurrent [32,512]x[512,2048]", fwd, fwd_blas, grad, grad_blas);
    out["lstm recurrent"] = {{"forward_gflops", fwd},
                             {"forward_openblas_gflops", fwd_blas},
                             {"input_grad_gflops", grad},
                             {"input_grad_openblas_gflops", grad_blas}};
  }
  std::printf("%s\n", out.dump().c_str());
}
