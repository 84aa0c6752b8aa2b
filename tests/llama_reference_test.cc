// autoshard's Llama family against PyTorch (tests/data/{llama,qwen2}_reference
// .safetensors and the Hugging Face directories beside them, written by
// tools/make_llama_reference.py): logits, loss, every gradient, and AdamW
// steps, on one device and on meshes that split the 2 kv heads of the llama
// over 3 and 4 devices (and qwen2's single kv head), planned by AutoShard
// and by the Megatron layout.
#include <gtest/gtest.h>

#include "autoshard/io/llama_formats.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/models/llama.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/runtime/executor.h"

namespace autoshard {
namespace {

const std::string kData = AUTOSHARD_TEST_DATA;

struct Fixture {
  std::string name;
  SafetensorsFile ref{kData + "/" + name + "_reference.safetensors"};
  Tensor x = ref.load("x"), y = ref.load("y");
  LlamaConfig config = llama_config_of(kData + "/hf_" + name);
  Llama model{config, x.dim(1)};
  std::map<std::string, std::string> hf = llama_hf_names(config);

  explicit Fixture(std::string n) : name(std::move(n)) {
    load_llama_weights(model, kData + "/hf_" + name);
  }
  // A reference tensor of `prefix` + the weight's Hugging Face name, in the weight's shape.
  Tensor expected(const std::string& prefix, const std::string& path, const Shape& shape) {
    return ref.load(prefix + hf.at(path)).reshaped(shape);
  }
};

class LlamaReference : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaReference, EveryCheckpointTensorIsAWeight) {
  Fixture f(GetParam());
  EXPECT_EQ(f.model.weight_paths().size(), f.hf.size());
  for (const std::string& path : f.model.weight_paths()) EXPECT_TRUE(f.hf.count(path)) << path;
}

TEST_P(LlamaReference, LogitsAndLoss) {
  Fixture f(GetParam());
  EXPECT_LT(max_relative_error(f.model.predict_on_batch(f.x), f.ref.load("logits")), 1e-5);
  f.model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const double expected = f.ref.load("loss").item();
  EXPECT_NEAR(f.model.test_on_batch(f.x, f.y), expected, 1e-5 * expected);
}

TEST_P(LlamaReference, EveryGradient) {
  Fixture f(GetParam());
  Graph g;
  Value logits = f.model.trace_forward(g, f.x.dim(0), /*training=*/false);
  Value loss =
      losses::sparse_categorical_crossentropy(logits, g.input("y", f.y.shape(), DType::I32));
  std::vector<Value> params;
  for (int id : g.parameters()) params.push_back(g.value(id));
  std::vector<Value> grads = gradients(loss, params);
  std::vector<int> outputs;
  for (Value v : grads) outputs.push_back(v.id);
  Executor exec(g, outputs);
  for (int id : g.parameters()) exec.bind(id, f.model.gather_weight(g.node(id).leaf().key()));
  exec.bind(g.find_input("x"), f.x);
  exec.bind(g.find_input("y"), f.y);
  exec.run();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string& path = params[i].node().leaf().key();
    EXPECT_LT(
        max_relative_error(exec.value(grads[i].id), f.expected("grad.", path, params[i].shape())),
        1e-4)
        << path;
  }
}

// AdamW with clipping on a mesh: the losses of every step and the weights
// after them, against PyTorch's on one device.
void check_training(const std::string& name, std::shared_ptr<Distribution> dist,
                    const std::string& what) {
  Fixture f(name);
  if (dist) f.model.set_distribution(dist);
  EXPECT_LT(max_relative_error(f.model.predict_on_batch(f.x), f.ref.load("logits")), 1e-5) << what;
  f.model.compile(
      AdamW({.learning_rate = 3e-3, .beta_2 = 0.95, .weight_decay = 0.1, .clipnorm = 1.0}),
      losses::sparse_categorical_crossentropy);
  const std::vector<float> expected = f.ref.load("adamw_losses").to_vector();
  for (size_t step = 0; step < expected.size(); ++step)
    EXPECT_NEAR(f.model.train_on_batch(f.x, f.y), expected[step], 1e-4 * expected[step])
        << what << ", step " << step + 1;
  for (const std::string& path : f.model.weight_paths()) {
    Tensor w = f.model.gather_weight(path);
    EXPECT_LT(max_relative_error(w, f.expected("after.", path, w.shape())), 1e-4)
        << what << ": " << path;
  }
}

TEST_P(LlamaReference, AdamWStepsOnOneDevice) {
  check_training(GetParam(), nullptr, "one device");
}

TEST_P(LlamaReference, AdamWStepsOnMeshesMatchOneDevice) {
  for (const char* spec : {"model=3", "model=4", "data=2,model=2"}) {
    const DeviceMesh mesh = DeviceMesh::parse(spec);
    check_training(GetParam(), std::make_shared<ModelParallel>(mesh, llama_megatron_layout()),
                   std::string("megatron on ") + spec);
    check_training(GetParam(),
                   std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2}),
                   std::string("autoshard on ") + spec);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, LlamaReference, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace autoshard
