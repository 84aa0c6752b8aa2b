// Helpers shared by the tests: seeded random tensors and running a Graph.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "autoshard/error.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/ir/graph.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/model.h"
#include "autoshard/runtime/executor.h"
#include "autoshard/tensor/tensor.h"
#include "tensor/rng.h"

namespace autoshard::testing {

// The committed fixtures (tests/data).
inline const std::string kTestData = AUTOSHARD_TEST_DATA;

// The message of the autoshard::Error that `f()` throws; "" when it throws none.
template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A fresh directory under the system's temporary one, removed with it.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline Tensor random_tensor(Shape shape, uint64_t seed, float scale = 1.0f) {
  Tensor t(std::move(shape));
  CounterRng rng(seed, 7);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * rng.normal(static_cast<uint64_t>(i));
  return t;
}

inline Tensor random_ids(Shape shape, int32_t limit, uint64_t seed) {
  Tensor t(std::move(shape), DType::I32);
  CounterRng rng(seed, 11);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.i32()[i] = static_cast<int32_t>(rng.uniform(static_cast<uint64_t>(i)) * limit) % limit;
  return t;
}

// Runs `graph` with leaves bound by name (parameter path or input name) and
// returns the requested values.
inline std::vector<Tensor> evaluate(const Graph& graph, const std::map<std::string, Tensor>& leaves,
                                    const std::vector<int>& outputs) {
  Executor exec(graph, outputs);
  for (int id = 0; id < graph.size(); ++id) {
    const Node& n = graph.node(id);
    if (n.op != Op::Parameter && n.op != Op::Input) continue;
    auto it = leaves.find(n.leaf().key());
    if (it != leaves.end()) exec.bind(id, it->second);
  }
  exec.run();
  std::vector<Tensor> out;
  for (int o : outputs) out.push_back(exec.value(o).clone());
  return out;
}

// The gradient of the mean cross-entropy of `model`'s logits on (x, y) with
// respect to every weight, by path, on one device.
inline std::map<std::string, Tensor> loss_gradients(Model& model, const Tensor& x,
                                                    const Tensor& y) {
  Graph g;
  Value logits = model.trace_forward(g, x.dim(0), /*training=*/false);
  Value loss = losses::sparse_categorical_crossentropy(logits, g.input("y", y.shape(), DType::I32));
  std::vector<Value> params;
  for (int id : g.parameters()) params.push_back(g.value(id));
  std::vector<Value> grads = gradients(loss, params);
  std::vector<int> outputs;
  for (Value v : grads) outputs.push_back(v.id);
  Executor exec(g, outputs);
  for (int id : g.parameters()) exec.bind(id, model.gather_weight(g.node(id).leaf().key()));
  exec.bind(g.find_input("x"), x);
  exec.bind(g.find_input("y"), y);
  exec.run();
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < params.size(); ++i)
    out[params[i].node().leaf().key()] = exec.value(grads[i].id).clone();
  return out;
}

// A fixture with a fresh directory per test, removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("autoshard_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name() + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

}  // namespace autoshard::testing
