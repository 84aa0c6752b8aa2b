// Times a training step (forward, backward, SGD with momentum) of two Keras
// models built from the vision and sequence layers, for bench/keras_layers.sh:
//
//   resnet  ResNet-18 in its CIFAR shape (32x32x3 images): a 3x3 stem of 64
//           channels, four stages of two basic blocks (64, 128, 256, 512
//           channels; stages 2-4 start with stride 2 and a 1x1 projection),
//           global average pooling, Dense(10). No BatchNormalization (the
//           PyTorch script leaves it out too), convolutions with biases.
//   lstm    a language model: Embedding(vocab, 512), two LSTM(512,
//           return_sequences), Dense(vocab) on every step, sparse
//           categorical cross-entropy over the steps.
//   gru     the same language model with two GRU(512) (Keras's defaults:
//           reset_after, tanh and sigmoid).
//
//   bench_keras_layers --model resnet|lstm|gru [--batch N] [--seq T] [--vocab V] [--units U]
//                      [--steps 5] [--warmup 2] [--mesh data=2] [--profile]
// Prints a readable line (and the op profile) on stderr and one JSON object on
// stdout with the median step and the step's FLOPs (forward x 3).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "autoshard/autoshard.h"
#include "autoshard/ir/blas_core.h"
#include "autoshard/nn/conv_layers.h"
#include "autoshard/nn/pooling_layers.h"
#include "autoshard/nn/recurrent_layers.h"

using namespace autoshard;

namespace {

struct Args {
  std::string model = "resnet", mesh;
  int64_t batch = 0, seq = 64, vocab = 1000, units = 512, steps = 5, warmup = 2;
  bool profile = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    auto next = [&] {
      AS_CHECK(i + 1 < argc, "bench_keras_layers: ", f, " needs a value");
      return std::string(argv[++i]);
    };
    if (f == "--model")
      a.model = next();
    else if (f == "--batch")
      a.batch = std::stoll(next());
    else if (f == "--seq")
      a.seq = std::stoll(next());
    else if (f == "--vocab")
      a.vocab = std::stoll(next());
    else if (f == "--units")
      a.units = std::stoll(next());
    else if (f == "--steps")
      a.steps = std::stoll(next());
    else if (f == "--warmup")
      a.warmup = std::stoll(next());
    else if (f == "--mesh")
      a.mesh = next();
    else if (f == "--profile")
      a.profile = true;
    else
      fail("bench_keras_layers: unknown flag ", f, " (see the top of bench/keras_layers.cc)");
  }
  AS_CHECK(a.model == "resnet" || a.model == "lstm" || a.model == "gru",
           "bench_keras_layers: --model is resnet, lstm or gru");
  if (a.batch == 0) a.batch = a.model == "resnet" ? 64 : 32;
  return a;
}

ConvOptions conv(int64_t stride, const std::string& activation = "") {
  return ConvOptions().strides({stride}).padding("same").activation(activation);
}

// Two 3x3 convolutions and the shortcut (a 1x1 projection where the shape
// changes), summed, then relu.
SymbolicTensor basic_block(SymbolicTensor x, int64_t in, int64_t out, int64_t stride) {
  SymbolicTensor y = Conv2D(out, {3}, conv(stride, "relu"))(x);
  y = Conv2D(out, {3}, conv(1))(y);
  SymbolicTensor shortcut = x;
  if (stride != 1 || in != out) shortcut = Conv2D(out, {1}, conv(stride))(x);
  return Activation("relu")(Add()({y, shortcut}));
}

std::unique_ptr<Model> resnet18() {
  SymbolicTensor in = Input({32, 32, 3});
  SymbolicTensor x = Conv2D(64, {3}, conv(1, "relu"))(in);
  int64_t channels = 64;
  for (int64_t width : {64, 128, 256, 512}) {
    x = basic_block(x, channels, width, width == 64 ? 1 : 2);
    x = basic_block(x, width, width, 1);
    channels = width;
  }
  return std::make_unique<Model>(std::vector{in}, Dense(10)(GlobalAveragePooling2D()(x)));
}

std::unique_ptr<Model> language_model(const Args& a) {
  SymbolicTensor in = Input({a.seq}, DType::I32);
  auto recurrent = [&]() -> Layer {
    if (a.model == "gru") return GRU(a.units, GRUOptions().return_sequences(true));
    return LSTM(a.units, LSTMOptions().return_sequences(true));
  };
  return std::make_unique<Sequential>(
      in,
      std::vector<Layer>{Embedding(a.vocab, a.units), recurrent(), recurrent(), Dense(a.vocab)});
}

// Multiply-adds x 2 of one forward pass; the step counts 3 of them (the
// backward pass is two products per forward product).
double resnet_forward_flops(int64_t batch) {
  double f = 0;
  auto c = [&](int64_t hw, int64_t k, int64_t cin, int64_t cout) {
    f += 2.0 * batch * hw * hw * k * k * cin * cout;
  };
  c(32, 3, 3, 64);
  int64_t channels = 64, hw = 32;
  for (int64_t width : {64, 128, 256, 512}) {
    if (width != 64) hw /= 2;
    c(hw, 3, channels, width), c(hw, 3, width, width);
    if (channels != width) c(hw, 1, channels, width);
    c(hw, 3, width, width), c(hw, 3, width, width);
    channels = width;
  }
  return f + 2.0 * batch * 512 * 10;
}

// Two recurrent layers of `gates` gates (LSTM 4, GRU 3), each an input and a
// recurrent product of units x gates units per token, and the Dense head.
double language_model_forward_flops(const Args& a) {
  const double tokens = double(a.batch) * a.seq, u = double(a.units);
  const double gates = a.model == "gru" ? 3 : 4;
  return 2.0 * tokens * (2 * (u + u) * gates * u + u * a.vocab);
}

}  // namespace

int main(int argc, char** argv) {
  blas::use_best_blas_kernels(argv);  // as the CLI: OpenBLAS's best kernels for this CPU
  try {
    const Args a = parse(argc, argv);
    std::unique_ptr<Model> model = a.model == "resnet" ? resnet18() : language_model(a);
    if (!a.mesh.empty())
      model->set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(a.mesh), "data"));
    model->compile(SGD({.learning_rate = 0.01, .momentum = 0.9}),
                   losses::sparse_categorical_crossentropy);
    std::mt19937 rng(1);
    Tensor x =
        a.model == "resnet" ? Tensor({a.batch, 32, 32, 3}) : Tensor({a.batch, a.seq}, DType::I32);
    Tensor y =
        a.model == "resnet" ? Tensor({a.batch}, DType::I32) : Tensor({a.batch, a.seq}, DType::I32);
    std::normal_distribution<float> normal;
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.dtype() == DType::F32)
        x.f32()[i] = normal(rng);
      else
        x.i32()[i] = int32_t(rng() % uint32_t(a.vocab));
    }
    const uint32_t classes = a.model == "resnet" ? 10 : uint32_t(a.vocab);
    for (int64_t i = 0; i < y.numel(); ++i) y.i32()[i] = int32_t(rng() % classes);

    for (int64_t s = 0; s < a.warmup; ++s) model->train_on_batch(x, y);
    OpProfile prof;
    if (a.profile) model->profile = &prof;
    std::vector<double> times;
    double loss = 0;
    for (int64_t s = 0; s < a.steps; ++s) {
      const auto t0 = std::chrono::steady_clock::now();
      loss = model->train_on_batch(x, y);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    const double median = times[times.size() / 2];
    const double flops =
        3 * (a.model == "resnet" ? resnet_forward_flops(a.batch) : language_model_forward_flops(a));
    std::fprintf(stderr,
                 "autoshard %s step on %s, batch %lld: median %.3f s over %lld (min %.3f), %.1f "
                 "GFLOP/s, loss %.4f\n",
                 a.model.c_str(), a.mesh.empty() ? "1 device" : a.mesh.c_str(), (long long)a.batch,
                 median, (long long)a.steps, times.front(), flops / median * 1e-9, loss);
    if (a.profile) std::fprintf(stderr, "%s", prof.table().c_str());
    nlohmann::json j{{"engine", "autoshard"},
                     {"model", a.model},
                     {"mesh", a.mesh.empty() ? "1 device" : a.mesh},
                     {"batch", a.batch},
                     {"params", model->count_params()},
                     {"steps", a.steps},
                     {"step_flops", flops},
                     {"median_step_s", median},
                     {"min_step_s", times.front()},
                     {"blas_core", blas::blas_info().core}};
    if (a.model != "resnet") j["seq"] = a.seq, j["vocab"] = a.vocab, j["units"] = a.units;
    std::printf("%s\n", j.dump().c_str());
  } catch (const Error& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", e.what());
    return 1;
  }
}
