// BERT and RoBERTa sequence classifiers against PyTorch (tests/data/
// <name>_reference.safetensors and hf_<name>, written by
// tools/make_bert_reference.py): logits, loss, every gradient and AdamW
// steps, with padded sequences, on one device and on meshes that split the
// heads unevenly (6 over 4), planned by AutoShard and by Megatron's layout.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/models/bert/formats.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/runtime/executor.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kTestData;

struct Fixture {
  std::string name;
  std::string dir = kTestData + "/hf_" + name;
  SafetensorsFile ref{kTestData + "/" + name + "_reference.safetensors"};
  Tensor ids = ref.load("token_ids"), segments = ref.load("segment_ids");
  Tensor mask = ref.load("padding_mask"), labels = ref.load("labels");
  BertConfig config = bert_config_of(dir);
  Bert model{config, ids.dim(1)};
  std::map<std::string, std::string> hf = bert_hf_names(config);

  explicit Fixture(std::string n) : name(std::move(n)) { load_bert_weights(model, dir); }
  ModelInputs inputs() const {
    return {{"token_ids", ids}, {"segment_ids", segments}, {"padding_mask", mask}};
  }
  Tensor expected(const std::string& prefix, const std::string& path, const Shape& shape) {
    return ref.load(prefix + hf.at(path)).reshaped(shape);
  }
};

class BertReference : public ::testing::TestWithParam<std::string> {};

TEST_P(BertReference, EveryCheckpointTensorIsAWeight) {
  Fixture f(GetParam());
  EXPECT_EQ(f.model.weight_paths().size(), f.hf.size());
  for (const std::string& path : f.model.weight_paths()) EXPECT_TRUE(f.hf.count(path)) << path;
}

TEST_P(BertReference, LogitsAndLoss) {
  Fixture f(GetParam());
  EXPECT_LT(max_relative_error(f.model.predict_on_batch(f.inputs()), f.ref.load("logits")), 1e-5);
  f.model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const double expected = f.ref.load("loss").item();
  EXPECT_NEAR(f.model.test_on_batch(f.inputs(), f.labels), expected, 1e-5 * expected);
}

TEST_P(BertReference, EveryGradient) {
  Fixture f(GetParam());
  Graph g;
  Value logits = f.model.trace_forward(g, f.ids.dim(0), /*training=*/false);
  Value loss =
      losses::sparse_categorical_crossentropy(logits, g.input("y", f.labels.shape(), DType::I32));
  std::vector<Value> params;
  for (int id : g.parameters()) params.push_back(g.value(id));
  const std::vector<Value> grads = gradients(loss, params);
  std::vector<int> outputs;
  for (Value v : grads) outputs.push_back(v.id);
  Executor exec(g, outputs);
  for (int id : g.parameters()) exec.bind(id, f.model.gather_weight(g.node(id).leaf().key()));
  exec.bind(g.find_input("x"), f.ids);  // the inputs in the model's order
  exec.bind(g.find_input("x1"), f.segments);
  exec.bind(g.find_input("x2"), f.mask);
  exec.bind(g.find_input("y"), f.labels);
  exec.run();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string path = params[i].node().leaf().key();
    const Tensor& grad = exec.value(grads[i].id);
    EXPECT_LT(max_relative_error(grad, f.expected("grad.", path, grad.shape())), 1e-4) << path;
  }
}

void check_training(const std::string& name, std::shared_ptr<Distribution> dist,
                    const std::string& what) {
  Fixture f(name);
  if (dist) f.model.set_distribution(dist);
  EXPECT_LT(max_relative_error(f.model.predict_on_batch(f.inputs()), f.ref.load("logits")), 1e-5)
      << what;
  f.model.compile(
      AdamW({.learning_rate = 3e-3, .beta_2 = 0.95, .weight_decay = 0.1, .clipnorm = 1.0}),
      losses::sparse_categorical_crossentropy);
  const std::vector<float> expected = f.ref.load("adamw_losses").to_vector();
  for (size_t step = 0; step < expected.size(); ++step)
    EXPECT_NEAR(f.model.train_on_batch(f.inputs(), f.labels), expected[step], 1e-4 * expected[step])
        << what << ", step " << step + 1;
  for (const std::string& path : f.model.weight_paths()) {
    Tensor w = f.model.gather_weight(path);
    EXPECT_LT(max_relative_error(w, f.expected("after.", path, w.shape())), 1e-4)
        << what << ": " << path;
  }
}

TEST_P(BertReference, AdamWStepsOnOneDevice) {
  check_training(GetParam(), nullptr, "one device");
}

TEST_P(BertReference, AdamWStepsOnMeshesMatchOneDevice) {
  for (const char* spec : {"model=3", "model=4", "data=2,model=2"}) {
    const DeviceMesh mesh = DeviceMesh::parse(spec);
    check_training(GetParam(), std::make_shared<ModelParallel>(mesh, bert_megatron_layout()),
                   std::string("megatron on ") + spec);
    check_training(GetParam(),
                   std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2}),
                   std::string("autoshard on ") + spec);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, BertReference,
                         ::testing::Values("bert", "roberta", "bert_mlm", "roberta_mlm"));

class BertCheckpoint : public testing::TempDirTest {};

// Saved and loaded back: the same weights bit for bit (RoBERTa's F16 as F16).
TEST_F(BertCheckpoint, SaveAndLoadBack) {
  for (const auto& [name, dtype] : {std::pair{"bert", "F32"}, std::pair{"roberta", "F16"}}) {
    Fixture f(name);
    const std::string out = (dir_ / name).string();
    save_hf_bert(f.model, out, {.dtype = dtype});
    Bert again(bert_config_of(out), f.ids.dim(1), /*seed=*/5);
    load_bert_weights(again, out);
    for (const std::string& path : f.model.weight_paths())
      EXPECT_EQ(max_relative_error(again.gather_weight(path), f.model.gather_weight(path)), 0)
          << name << " " << path;
  }
}

TEST(BertConfig, UnsupportedValuesAreErrorsNamingTheField) {
  const std::string base =
      R"("model_type": "bert", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 12,
         "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16)";
  auto parse = [&](const std::string& extra) {
    try {
      BertConfig::from_reader(ConfigReader("{" + base + extra + "}", "c.json"));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(parse(""), "");
  EXPECT_EQ(BertConfig::from_reader(
                ConfigReader("{" + base + R"(, "id2label": {"0": "x", "1": "y", "2": "z"}})", "c"))
                .num_labels,
            3);
  EXPECT_NE(parse(R"(, "hidden_act": "relu")").find("hidden_act"), std::string::npos);
  EXPECT_NE(parse(R"(, "position_embedding_type": "relative_key")").find("relative_key"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "is_decoder": true)").find("is_decoder"), std::string::npos);
  EXPECT_NE(parse(R"(, "num_attention_heads": 3)").find("multiple"), std::string::npos);
  // A sequence longer than the positions is refused (RoBERTa's start at 2).
  const BertConfig roberta = BertConfig::from_reader(ConfigReader(
      R"({"model_type": "roberta", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 12,
          "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16})",
      "c.json"));
  EXPECT_THROW(Bert(roberta, 15), Error);
  EXPECT_NO_THROW(Bert(roberta, 14));
}

}  // namespace
}  // namespace autoshard
