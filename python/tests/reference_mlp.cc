// The Python tests' reference: the same small MLP as
// python/tests/test_same_as_cpp.py, trained through the C++ API on the same
// weights and data, so the test can compare the two bit for bit.
//
//   autoshard_py_reference DIR [MESH]
//
// Reads DIR/x.npy (f32 [N, 784]), DIR/y.npy (i32 [N]) and each weight from
// DIR/<path>.npy; trains 2 epochs of batch 16 without shuffling (with MESH,
// e.g. "data=2,model=2", under ModelParallel splitting the kernels over
// "model"); writes DIR/out/loss.npy (per epoch), DIR/out/pred.npy and each
// trained weight as DIR/out/<path>.npy.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "autoshard/io/npy.h"
#include "autoshard/nn/model.h"
#include "autoshard/optim/keras_optimizers.h"

using namespace autoshard;

namespace {

void write(const std::filesystem::path& path, const Tensor& t) {
  std::ofstream out(path, std::ios::binary);
  const std::string bytes = npy_bytes(t);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  AS_CHECK(out.good(), "cannot write ", path.string());
}

int run(const std::filesystem::path& dir, const std::string& mesh) {
  if (!mesh.empty()) {
    LayoutMap layouts;
    layouts["d1.kernel"] = TensorLayout({std::nullopt, "model"});
    layouts["d2.kernel"] = TensorLayout({"model", std::nullopt});
    set_distribution(std::make_shared<ModelParallel>(DeviceMesh::parse(mesh), layouts, "data"));
  }
  SymbolicTensor x = Input({784}, DType::F32, "x");
  Sequential model(x, {Dense(32, DenseOptions().activation("relu").name("d1")),
                       Dense(10, DenseOptions().name("d2"))});
  model.compile(optimizers::Adam(), losses::SparseCategoricalCrossentropy({.from_logits = true}));
  for (const std::string& p : model.weight_paths())
    model.set_weight(p, read_npy((dir / (p + ".npy")).string(), p).tensor);
  const Tensor xs = read_npy((dir / "x.npy").string(), "x").tensor;
  const Tensor ys = npy_as(read_npy((dir / "y.npy").string(), "y"), DType::I32, "y");
  History h = model.fit(xs, ys, {.batch_size = 16, .epochs = 2, .verbose = false});
  std::filesystem::create_directories(dir / "out");
  std::vector<float> loss(h.loss.begin(), h.loss.end());
  write(dir / "out" / "loss.npy", Tensor::from({static_cast<int64_t>(loss.size())}, loss));
  write(dir / "out" / "pred.npy", model.predict(xs, 16));
  for (const std::string& p : model.weight_paths())
    write(dir / "out" / (p + ".npy"), model.gather_weight(p));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: autoshard_py_reference DIR [MESH]\n");
    return 2;
  }
  try {
    return run(argv[1], argc == 3 ? argv[2] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", e.what());
    return 1;
  }
}
