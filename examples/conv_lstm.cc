// A Conv2D + LSTM classifier trained with AutoShard on a mesh: convolutions
// find strokes in each image, the LSTM reads the feature map's rows as a
// sequence, a Dense layer names the class. Accuracy per epoch.
//
//   build/examples/conv_lstm                              # data=2,model=2, 6 epochs
//   build/examples/conv_lstm --mesh model=3 --epochs 6 --expect-accuracy 0.9
//
// The data is synthetic, so it runs anywhere: 16 x 16 grey images of one
// line through a random point, horizontal, vertical, diagonal or
// anti-diagonal (the 4 classes), in noise.
#include <cstdio>
#include <random>
#include <string>

#include "autoshard/autoshard.h"
#include "autoshard/nn/conv_layers.h"
#include "autoshard/nn/pooling_layers.h"
#include "autoshard/nn/recurrent_layers.h"
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/optim/keras_optimizers.h"

using namespace autoshard;

namespace {

constexpr int kSide = 16;

struct Data {
  Tensor x, y;  // [n, 16, 16, 1], [n] class ids
};

Data make_data(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.25f);
  Data d{Tensor({n, kSide, kSide, 1}), Tensor({n}, DType::I32)};
  const int dr[4] = {0, 1, 1, 1}, dc[4] = {1, 0, 1, -1};  // the line's direction per class
  for (int64_t i = 0; i < n; ++i) {
    const int label = int(rng() % 4);
    float* img = d.x.f32() + i * kSide * kSide;
    for (int p = 0; p < kSide * kSide; ++p) img[p] = noise(rng);
    const int r0 = 3 + int(rng() % 10), c0 = 3 + int(rng() % 10);
    for (int s = -kSide; s <= kSide; ++s) {
      const int r = r0 + s * dr[label], c = c0 + s * dc[label];
      if (r >= 0 && r < kSide && c >= 0 && c < kSide) img[r * kSide + c] += 1.0f;
    }
    d.y.i32()[i] = label;
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh = "data=2,model=2";
  int epochs = 6;
  double expect = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--mesh")
      mesh = value;
    else if (flag == "--epochs")
      epochs = std::stoi(value);
    else if (flag == "--expect-accuracy")
      expect = std::stod(value);
    else {
      std::fprintf(stderr, "unknown flag %s (--mesh M, --epochs N, --expect-accuracy A)\n",
                   argv[i]);
      return 2;
    }
  }
  try {
    // [16, 16, 1] -> Conv2D 3x3 -> [16, 16, 8] -> pool -> [8, 8, 8] -> Conv2D
    // -> [8, 8, 16] -> rows as 8 time steps of 128 features -> LSTM(32) -> 4.
    Sequential model(Input({kSide, kSide, 1}),
                     {Conv2D(8, {3}, ConvOptions().padding("same").activation("relu")),
                      MaxPooling2D(PoolingOptions().pool_size({2})),
                      Conv2D(16, {3}, ConvOptions().padding("same").activation("relu")),
                      Reshape({kSide / 2, (kSide / 2) * 16}), LSTM(32), Dense(4)});
    model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data"));
    model.compile(optimizers::Adam({.learning_rate = 3e-3}),
                  losses::SparseCategoricalCrossentropy({.from_logits = true}),
                  {metrics::accuracy()});

    const Data train = make_data(512, 1), held_out = make_data(128, 2);
    const History h =
        model.fit(train.x, train.y, {.batch_size = 32, .epochs = epochs, .verbose = false});
    for (int e = 0; e < epochs; ++e)
      std::printf("epoch %d  loss %.4f  accuracy %.3f\n", e + 1, h.loss[e],
                  h.metrics.at("accuracy")[e]);
    const Logs test = model.evaluate_with_metrics(held_out.x, held_out.y);
    std::printf("held out on %s: loss %.4f  accuracy %.3f\n", mesh.c_str(), test.at("loss"),
                test.at("accuracy"));
    return test.at("accuracy") >= expect ? 0 : 1;
  } catch (const Error& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", e.what());
    return 1;
  }
}
