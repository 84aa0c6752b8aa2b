// The recurrent layers' elementwise kernels, fast against the plain loops
// kept beside them (the kernels before the speed work), on the shapes of an
// LSTM(512) step at batch 32:
//   pad: a gate's crop [32, 2048] -> [32, 512] and a time step's crop
//        [64, 32, 2048] -> [1, 32, 2048], and ZeroPadding2D on [64, 32, 32, 64];
//   unary: sigmoid and its gradient on [32, 512], next to the Tanh op's loop.
//
//   bench_keras_kernels [--repeats 200]
// Prints microseconds per call on stderr and a JSON object on stdout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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
  std::printf("%s\n", out.dump().c_str());
}
