// autoshard's decoders from Hugging Face directories against PyTorch
// (tests/data/<name>_reference.safetensors and the directories hf_<name>
// beside them, written by tools/make_llama_reference.py for the Llama family
// and tools/make_opt_reference.py for OPT): logits, loss, every gradient, and
// AdamW steps, on one device and on meshes that split the 2 kv heads of the
// llama over 3 and 4 devices (and qwen2's single kv head, OPT's 6 heads over
// 4), planned by AutoShard and by the Megatron layout; greedy generation over
// the key-value cache. Phi-3 (tools/make_phi3_reference.py) is the Llama
// family's blocks on fused checkpoint tensors.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "autoshard/error.h"
#include "autoshard/io/hf_checkpoint.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/ir/autodiff.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/language_model.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/models/opt/formats.h"
#include "autoshard/models/phi3/phi3.h"
#include "autoshard/models/registry.h"
#include "autoshard/nn/generation.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/runtime/executor.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::error_of;

using testing::kTestData;

// Each weight path and its Hugging Face tensor name.
std::map<std::string, std::string> hf_names_of(const LanguageModelConfig& c) {
  if (const auto* opt = c.get_if<OPTConfig>()) return opt_hf_names(*opt);
  if (c.model_type() == "phi3") return phi3_hf_names(*c.get_if<LlamaConfig>());
  return llama_hf_names(*c.get_if<LlamaConfig>());
}

// Where a weight starts in its checkpoint tensor: 0, or, in a tensor that
// fuses several (Phi-3's qkv_proj and gate_up_proj), after the parts before
// it in Hugging Face's order.
int64_t offset_in_tensor(Model& model, const std::map<std::string, std::string>& hf,
                         const std::string& path) {
  const std::vector<std::string> order = {"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"};
  auto rank = [&](const std::string& p) {
    for (size_t i = 0; i < order.size(); ++i)
      if (p.find("." + order[i] + ".") != std::string::npos) return int64_t(i);
    return int64_t(-1);
  };
  int64_t offset = 0;
  for (const auto& [other, tensor] : hf)
    if (tensor == hf.at(path) && rank(other) < rank(path))
      offset += model.gather_weight(other).numel();
  return offset;
}

struct DecoderFixture {
  std::string name;
  std::string dir = kTestData + "/hf_" + name;
  SafetensorsFile ref{kTestData + "/" + name + "_reference.safetensors"};
  Tensor x = ref.load("x"), y = ref.load("y");
  LanguageModelConfig config = LanguageModelConfig::of(dir);
  std::unique_ptr<Model> built = config.build(x.dim(1), 0);
  Model& model = *built;
  std::map<std::string, std::string> hf = hf_names_of(config);

  explicit DecoderFixture(std::string n) : name(std::move(n)) {
    load_language_model_weights(model, dir);
  }
  // A reference tensor of `prefix` + the weight's Hugging Face name, in the weight's shape.
  Tensor expected(const std::string& prefix, const std::string& path, const Shape& shape) {
    const Tensor whole = ref.load(prefix + hf.at(path));
    if (whole.numel() == numel(shape)) return whole.reshaped(shape);
    Tensor part(shape);
    const int64_t offset = offset_in_tensor(model, hf, path);
    std::copy_n(whole.f32() + offset, part.numel(), part.f32());
    return part;
  }
};

class DecoderReference : public ::testing::TestWithParam<std::string> {};

TEST_P(DecoderReference, EveryCheckpointTensorIsAWeight) {
  DecoderFixture f(GetParam());
  EXPECT_EQ(f.model.weight_paths().size(), f.hf.size());
  for (const std::string& path : f.model.weight_paths()) EXPECT_TRUE(f.hf.count(path)) << path;
}

TEST_P(DecoderReference, LogitsAndLoss) {
  DecoderFixture f(GetParam());
  EXPECT_LT(max_relative_error(f.model.predict_on_batch(f.x), f.ref.load("logits")), 1e-5);
  f.model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const double expected = f.ref.load("loss").item();
  EXPECT_NEAR(f.model.test_on_batch(f.x, f.y), expected, 1e-5 * expected);
}

TEST_P(DecoderReference, EveryGradient) {
  DecoderFixture f(GetParam());
  for (const auto& [path, grad] : testing::loss_gradients(f.model, f.x, f.y))
    EXPECT_LT(max_relative_error(grad, f.expected("grad.", path, grad.shape())), 1e-4) << path;
}

// AdamW with clipping on a mesh: the losses of every step and the weights
// after them, against PyTorch's on one device.
void check_decoder_training(const std::string& name, std::shared_ptr<Distribution> dist,
                            const std::string& what) {
  DecoderFixture f(name);
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

TEST_P(DecoderReference, AdamWStepsOnOneDevice) {
  check_decoder_training(GetParam(), nullptr, "one device");
}

TEST_P(DecoderReference, AdamWStepsOnMeshesMatchOneDevice) {
  for (const char* spec : {"model=3", "model=4", "data=2,model=2"}) {
    const DeviceMesh mesh = DeviceMesh::parse(spec);
    check_decoder_training(
        GetParam(),
        std::make_shared<ModelParallel>(
            mesh, LanguageModelConfig::of(kTestData + "/hf_" + GetParam()).megatron_layout()),
        std::string("megatron on ") + spec);
    check_decoder_training(
        GetParam(),
        std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2}),
        std::string("autoshard on ") + spec);
  }
}

// Greedy generation over the sharded key-value cache continues the prompt
// as PyTorch's greedy loop does, token for token.
TEST_P(DecoderReference, GreedyGenerationMatchesPyTorch) {
  for (const char* spec : {"", "model=3", "model=4", "data=2,model=2"}) {
    for (const char* plan : {"megatron", "auto"}) {
      DecoderFixture f(GetParam());
      if (*spec) {
        const DeviceMesh mesh = DeviceMesh::parse(spec);
        if (std::string(plan) == "auto")
          f.model.set_distribution(
              std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2}));
        else
          f.model.set_distribution(
              std::make_shared<ModelParallel>(mesh, f.config.megatron_layout()));
      }
      const Tensor prompt = f.ref.load("generate.prompt"), greedy = f.ref.load("generate.greedy");
      const Generation g = generate(f.model, {prompt.i32(), prompt.i32() + prompt.numel()},
                                    {.max_new_tokens = greedy.numel(), .temperature = 0});
      EXPECT_EQ(g.output_ids, std::vector<int32_t>(greedy.i32(), greedy.i32() + greedy.numel()))
          << plan << " on " << (*spec ? spec : "one device");
      if (!*spec) break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, DecoderReference,
                         ::testing::Values("llama", "qwen2", "gemma", "mistral", "opt", "phi3"));

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

TEST(LlamaConfig, UnsupportedValuesAreErrorsNamingTheField) {
  const std::string base =
      R"("vocab_size": 10, "hidden_size": 8, "intermediate_size": 12, "num_hidden_layers": 1,
         "num_attention_heads": 2, "max_position_embeddings": 16)";
  auto parse = [&](const std::string& extra) {
    return error_of([&] { LlamaConfig::from_json_text("{" + base + extra + "}", "c.json"); });
  };
  EXPECT_EQ(parse(R"(, "model_type": "llama")"), "");
  EXPECT_NE(parse(R"(, "model_type": "falcon")").find("'falcon'"), std::string::npos);
  EXPECT_NE(parse(R"(, "model_type": "llama", "hidden_act": "relu2")").find("hidden_act"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "model_type": "llama", "mlp_bias": true)").find("mlp_bias"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "model_type": "llama", "rope_scaling": {"rope_type": "yarn"})").find("yarn"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "model_type": "llama", "num_key_value_heads": 3)").find("multiple"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "model_type": "llama", "head_dim": 5)").find("even"), std::string::npos);
  EXPECT_NE(parse(R"(, "model_type": "mistral", "sliding_window": 0)").find("sliding_window"),
            std::string::npos);
  // Mistral's window is read (and sequences longer than it run windowed).
  LlamaConfig mistral = LlamaConfig::from_json_text(
      "{" + base + R"(, "model_type": "mistral", "sliding_window": 4})", "c.json");
  EXPECT_EQ(mistral.sliding_window, 4);
  EXPECT_EQ(error_of([&] { Llama(mistral, 9); }), "");
}

TEST(Phi3Config, WhatItDoesNotRunIsAnErrorNamingTheField) {
  const std::string base =
      R"("model_type": "phi3", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 12,
         "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16)";
  auto parse = [&](const std::string& extra) {
    return error_of([&] { phi3_config(ConfigReader("{" + base + extra + "}", "c.json")); });
  };
  EXPECT_EQ(parse(R"(, "rope_scaling": null, "sliding_window": null, "resid_pdrop": 0.0)"), "");
  EXPECT_NE(parse(R"(, "rope_scaling": {"type": "longrope"})").find("longrope"), std::string::npos);
  EXPECT_NE(parse(R"(, "partial_rotary_factor": 0.75)").find("partial_rotary_factor"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "resid_pdrop": 0.1)").find("resid_pdrop"), std::string::npos);
  EXPECT_NE(parse(R"(, "hidden_act": "gelu")").find("hidden_act"), std::string::npos);
  EXPECT_NE(parse(R"(, "num_attention_heads": 3)").find("multiple"), std::string::npos);
  // A Phi-3 directory is the phi3 family's, and its models are its own.
  const LanguageModelConfig c = LanguageModelConfig::of(kTestData + "/hf_phi3");
  EXPECT_EQ(std::string(c.family().name()), "phi3");
  EXPECT_EQ(std::string(config_of_model(*c.build(4, 0))->family().name()), "phi3");
}

class DecoderCheckpoint : public testing::TempDirTest {
 protected:
  // A copy of the qwen2 directory to break.
  std::string copy() {
    std::filesystem::copy(kTestData + "/hf_qwen2", dir_ / "m");
    return (dir_ / "m").string();
  }
};

// The saved directory is the same model: its weights bit for bit, and its
// config.json (gemma's activation and norm, OPT's position rows included)
// the same logits.
TEST_F(DecoderCheckpoint, SaveAndLoadBackGiveTheSameModel) {
  for (const char* name : {"llama", "gemma", "opt", "phi3"}) {
    DecoderFixture f(name);
    const std::string out = (dir_ / name).string();
    save_language_model_hf(f.model, out);
    std::unique_ptr<Model> again = LanguageModelConfig::of(out).build(f.x.dim(1), /*seed=*/5);
    load_language_model_weights(*again, out);
    for (const std::string& path : f.model.weight_paths())
      EXPECT_EQ(max_relative_error(again->gather_weight(path), f.model.gather_weight(path)), 0)
          << name << " " << path;
    EXPECT_LT(max_relative_error(again->predict_on_batch(f.x), f.ref.load("logits")), 1e-5) << name;
  }
}

// Phi-3's fused tensors are written whole, the same values as the file read
// (their parts in Hugging Face's order), also when shards split the tensors
// between files: a fused tensor's parts stay in one.
TEST_F(DecoderCheckpoint, Phi3WritesItsFusedTensorsAsRead) {
  DecoderFixture f("phi3");
  const SafetensorsFile original(f.dir + "/model.safetensors");
  for (const uint64_t shard_bytes : {uint64_t{0}, uint64_t{4096}}) {
    const std::string out = (dir_ / ("phi3_" + std::to_string(shard_bytes))).string();
    save_language_model_hf(f.model, out, {.max_shard_bytes = shard_bytes});
    const HFCheckpoint saved(out);
    for (const SafetensorsEntry& e : original.entries())
      EXPECT_EQ(max_relative_error(saved.file_of(e.name)->load(e.name), original.load(e.name)), 0)
          << e.name << " (shards of " << shard_bytes << " bytes)";
    std::unique_ptr<Model> again = LanguageModelConfig::of(out).build(f.x.dim(1), 5);
    load_language_model_weights(*again, out);
    EXPECT_LT(max_relative_error(again->predict_on_batch(f.x), f.ref.load("logits")), 1e-5);
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ / "phi3_4096" / "model.safetensors.index.json"));
}

// Saving in the checkpoints' own dtypes (the llama's BF16 from a mesh of 3
// devices, OPT's F16 from one) gives back every weight bit for bit, in shards
// with an index when a shard size is set; the config names the dtype.
TEST_F(DecoderCheckpoint, SavesBf16AndF16ShardsThatLoadBackExactly) {
  for (const auto& [name, dtype, shard] :
       {std::tuple{"llama", "BF16", 4000}, std::tuple{"opt", "F16", 0}}) {
    DecoderFixture f(name);
    if (shard > 0)
      f.model.set_distribution(std::make_shared<ModelParallel>(DeviceMesh::parse("model=3"),
                                                               f.config.megatron_layout()));
    const std::string out = (dir_ / name).string();
    const HfSaveOptions options{.dtype = dtype, .max_shard_bytes = uint64_t(shard)};
    if (auto* opt = dynamic_cast<OPT*>(&f.model))
      save_hf_opt(*opt, out, options);
    else
      save_hf_llama(dynamic_cast<Llama&>(f.model), out, options);
    const HFCheckpoint files(out);
    size_t shards = 0;
    for (const auto& entry : std::filesystem::directory_iterator(out))
      shards += entry.path().extension() == ".safetensors";
    EXPECT_EQ(shards > 1, shard > 0) << name << ": " << shards << " files";
    EXPECT_EQ(std::filesystem::exists(out + "/model.safetensors.index.json"), shard > 0) << name;
    for (const std::string& tensor : files.tensors())
      EXPECT_EQ(files.file_of(tensor)->entry(tensor).dtype, dtype) << tensor;
    const auto config = nlohmann::json::parse(std::ifstream(out + "/config.json"));
    EXPECT_EQ(config["torch_dtype"], options.torch_dtype());
    std::unique_ptr<Model> again = LanguageModelConfig::of(out).build(f.x.dim(1), /*seed=*/5);
    load_language_model_weights(*again, out);
    for (const std::string& path : f.model.weight_paths())
      EXPECT_EQ(max_relative_error(again->gather_weight(path), f.model.gather_weight(path)), 0)
          << name << " " << path;
  }
}

TEST(OPTConfig, UnsupportedValuesAreErrorsNamingTheField) {
  const std::string base =
      R"("model_type": "opt", "vocab_size": 10, "hidden_size": 8, "ffn_dim": 12,
         "num_hidden_layers": 1, "num_attention_heads": 2, "max_position_embeddings": 16)";
  auto parse = [&](const std::string& extra) {
    return error_of(
        [&] { OPTConfig::from_reader(ConfigReader("{" + base + extra + "}", "c.json")); });
  };
  EXPECT_EQ(parse(""), "");
  EXPECT_EQ(parse(R"(, "do_layer_norm_before": true, "activation_function": "relu")"), "");
  EXPECT_NE(parse(R"(, "do_layer_norm_before": false)").find("do_layer_norm_before"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "word_embed_proj_dim": 4)").find("word_embed_proj_dim"), std::string::npos);
  EXPECT_NE(parse(R"(, "activation_function": "gelu")").find("activation_function"),
            std::string::npos);
  EXPECT_NE(parse(R"(, "enable_bias": false)").find("enable_bias"), std::string::npos);
  EXPECT_NE(parse(R"(, "num_attention_heads": 3)").find("multiple"), std::string::npos);
  // Positions past max_position_embeddings are refused, not read from the
  // table's spare rows.
  const OPTConfig c = OPTConfig::from_reader(ConfigReader("{" + base + "}", "c.json"));
  EXPECT_NE(error_of([&] { OPT(c, 17); }).find("max_position_embeddings"), std::string::npos);
}

TEST_F(DecoderCheckpoint, MissingOrForeignTensorsAndBrokenIndexesAreErrors) {
  DecoderFixture f("qwen2");
  const std::string dir = copy();
  // A tensor of another config: the directory's config says one layer.
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  cfg["num_hidden_layers"] = 1;
  std::ofstream(dir + "/config.json") << cfg.dump();
  Llama one_layer(llama_config_of(dir), f.x.dim(1));
  EXPECT_NE(
      error_of([&] { load_llama_weights(one_layer, dir); }).find("has tensor 'model.layers.1."),
      std::string::npos);
  // A missing tensor: the model asks for three layers.
  cfg["num_hidden_layers"] = 3;
  std::ofstream(dir + "/config.json") << cfg.dump();
  Llama three(llama_config_of(dir), f.x.dim(1));
  EXPECT_NE(error_of([&] { load_llama_weights(three, dir); }).find("lacks tensor 'model.layers.2."),
            std::string::npos);
  // An index naming a shard that is not there.
  std::filesystem::rename(dir + "/model.safetensors", dir + "/model-00001-of-00001.safetensors");
  std::ofstream(dir + "/model.safetensors.index.json")
      << R"({"weight_map": {"model.norm.weight": "model-00009-of-00009.safetensors"}})";
  EXPECT_NE(error_of([&] { HFCheckpoint{dir}; }).find("model-00009-of-00009"), std::string::npos);
  std::ofstream(dir + "/model.safetensors.index.json") << R"({"weight_map": {"x": "../a"}})";
  EXPECT_NE(error_of([&] { HFCheckpoint{dir}; }).find("file name"), std::string::npos);
}

}  // namespace
}  // namespace autoshard
