// The C++ side of bench/python_overhead.py: fit() of a 2-layer MLP (784 ->
// HIDDEN relu -> 10, Adam, sparse categorical cross-entropy from logits) on
// batches of 32, through the C++ API, timed per step. The Python script
// runs the same model through autoshard.keras and divides the two.
//
//   bench_python_overhead [--steps 200] [--repeats 5] [--hidden 128] [--batch 32]
//
// One fit() of one epoch of STEPS batches warms up (compiles the step);
// each of REPEATS more is timed whole. Prints one JSON object on stdout:
// the median seconds per step and every repeat's.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "autoshard/autoshard.h"
#include "autoshard/optim/keras_optimizers.h"

using namespace autoshard;

namespace {

struct Args {
  int64_t steps = 200, repeats = 5, hidden = 128, batch = 32;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    AS_CHECK(i + 1 < argc, "bench_python_overhead: ", f, " needs a value");
    const int64_t v = std::stoll(argv[++i]);
    AS_CHECK(v >= 1, "bench_python_overhead: ", f, " must be >= 1");
    if (f == "--steps")
      a.steps = v;
    else if (f == "--repeats")
      a.repeats = v;
    else if (f == "--hidden")
      a.hidden = v;
    else if (f == "--batch")
      a.batch = v;
    else
      fail("bench_python_overhead: unknown flag ", f, " (--steps, --repeats, --hidden, --batch)");
  }
  return a;
}

int run(const Args& a) {
  const int64_t n = a.steps * a.batch;
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  Tensor x({n, 784});
  Tensor y({n}, DType::I32);
  for (int64_t i = 0; i < n * 784; ++i) x.f32()[i] = normal(rng);
  for (int64_t i = 0; i < n; ++i) y.i32()[i] = static_cast<int32_t>(i % 10);

  SymbolicTensor in = Input({784}, DType::F32, "x");
  Sequential model(in, {Dense(a.hidden, DenseOptions().activation("relu")), Dense(10)});
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  const FitOptions fit{.batch_size = a.batch, .epochs = 1, .verbose = false};
  model.fit(x, y, fit);  // warm-up: compiles the step
  std::vector<double> per_step;
  for (int64_t r = 0; r < a.repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    model.fit(x, y, fit);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    per_step.push_back(dt.count() / double(a.steps));
  }
  std::vector<double> sorted = per_step;
  std::sort(sorted.begin(), sorted.end());
  const nlohmann::json j = {{"engine", "c++"},
                            {"steps", a.steps},
                            {"batch", a.batch},
                            {"hidden", a.hidden},
                            {"step_s", sorted[sorted.size() / 2]},
                            {"repeats_s", per_step}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", e.what());
    return 1;
  }
}
