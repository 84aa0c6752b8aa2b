// The Keras quick-start model, trained with AutoShard on a mesh: a Sequential
// MLP on 784 inputs (Dense 1000 relu, Dense 500 relu, Dense 10 softmax),
// Keras's Adam and sparse categorical cross-entropy, accuracy per epoch.
//
//   build/examples/keras_quickstart                       # data=2,model=2, 3 epochs
//   build/examples/keras_quickstart --mesh model=4 --epochs 5 --expect-accuracy 0.9
//
// The data is synthetic and MNIST-shaped, so it runs anywhere: each of the
// 10 classes is a 28 x 28 prototype of a few bright strokes; an example is
// its class's prototype, shifted by up to a pixel, with noise.
#include <cstdio>
#include <random>
#include <string>

#include "autoshard/autoshard.h"
#include "autoshard/optim/keras_optimizers.h"

using namespace autoshard;

namespace {

struct Data {
  Tensor x, y;  // [n, 784] in [0, 1], [n] class ids
};

Data make_data(int64_t n, uint64_t seed) {
  std::mt19937_64 proto_rng(7);  // the same prototypes for every split
  std::vector<std::vector<float>> protos(10, std::vector<float>(28 * 28, 0.0f));
  for (auto& p : protos)
    for (int stroke = 0; stroke < 4; ++stroke) {  // a random walk of bright pixels
      int r = 4 + int(proto_rng() % 20), c = 4 + int(proto_rng() % 20);
      for (int s = 0; s < 14; ++s) {
        p[r * 28 + c] = 1.0f;
        r = std::clamp(r + int(proto_rng() % 3) - 1, 2, 25);
        c = std::clamp(c + int(proto_rng() % 3) - 1, 2, 25);
      }
    }
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.5f);
  Data d{Tensor({n, 784}), Tensor({n}, DType::I32)};
  for (int64_t i = 0; i < n; ++i) {
    const int label = int(rng() % 10);
    const int dr = int(rng() % 3) - 1, dc = int(rng() % 3) - 1;
    for (int r = 0; r < 28; ++r)
      for (int c = 0; c < 28; ++c) {
        const int sr = std::clamp(r - dr, 0, 27), sc = std::clamp(c - dc, 0, 27);
        d.x.f32()[i * 784 + r * 28 + c] =
            std::clamp(protos[label][sr * 28 + sc] + noise(rng), 0.0f, 1.0f);
      }
    d.y.i32()[i] = label;
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mesh = "data=2,model=2";
  int epochs = 3;
  double expect = 0;  // fail (exit 1) below this held-out accuracy
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
    // keras.Sequential([keras.Input((784,)), Dense(1000, "relu"), Dense(500, "relu"),
    //                   Dense(10, "softmax")])
    Sequential model(Input({784}), {Dense(1000, DenseOptions().activation("relu")),
                                    Dense(500, DenseOptions().activation("relu")),
                                    Dense(10, DenseOptions().activation("softmax"))});
    // AutoShard chooses every weight's and activation's split over the mesh.
    model.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data"));
    model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy(),
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
