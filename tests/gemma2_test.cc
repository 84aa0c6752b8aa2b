// Gemma 2 from a Hugging Face directory against PyTorch (tests/data/hf_gemma2
// and gemma2_reference.safetensors, written by
// tools/make_gemma2_reference.py): post-attention and post-feed-forward
// norms, soft-capped scores and logits, a sliding window of 4 keys on the
// even layers over sequences of 11 (17 when generating). Logits, loss, every
// gradient, AdamW steps on one device and on meshes, greedy generation over
// the sharded key-value cache; the config's fields checked one by one.
#include <gtest/gtest.h>

#include <filesystem>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/ir/ops.h"
#include "autoshard/models/language_model.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/nn/generation.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "cli_runner.h"
#include "ir/op_def.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::error_of;

using testing::kTestData;
const std::string kDir = kTestData + "/hf_gemma2";

struct Gemma2 {
  SafetensorsFile ref{kTestData + "/gemma2_reference.safetensors"};
  Tensor x = ref.load("x"), y = ref.load("y");
  LanguageModelConfig config = LanguageModelConfig::of(kDir);
  std::unique_ptr<Model> built = config.build(x.dim(1), 0);
  Model& model = *built;
  std::map<std::string, std::string> hf = llama_hf_names(*config.get_if<LlamaConfig>());

  Gemma2() { load_language_model_weights(model, kDir); }
  Tensor expected(const std::string& prefix, const std::string& path, const Shape& shape) {
    return ref.load(prefix + hf.at(path)).reshaped(shape);
  }
};

std::shared_ptr<Distribution> megatron(const char* mesh) {
  return std::make_shared<ModelParallel>(DeviceMesh::parse(mesh),
                                         LanguageModelConfig::of(kDir).megatron_layout());
}
std::shared_ptr<Distribution> autoshard(const char* mesh) {
  return std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data",
                                     AutoShardOptions{.time_limit_s = 0.2});
}

TEST(Gemma2, ConfigReadsEveryField) {
  const LlamaConfig c = LlamaConfig::from_json_file(kDir + "/config.json");
  EXPECT_EQ(c.model_type, "gemma2");
  EXPECT_TRUE(c.post_norms);
  EXPECT_EQ(c.query_pre_attn_scalar, 12);
  EXPECT_EQ(c.attn_logit_softcapping, 2.5);
  EXPECT_EQ(c.final_logit_softcapping, 3.0);
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.norm_gamma_offset, 1);
  // Layers 0 and 2 slide; layer 1 sees every earlier key.
  EXPECT_EQ(c.window_of(0), 4);
  EXPECT_EQ(c.window_of(1), 0);
  EXPECT_EQ(c.window_of(2), 4);
  EXPECT_DOUBLE_EQ(c.attention_scale(), 1 / std::sqrt(12.0));
}

TEST(Gemma2, UnsupportedOrBadFieldsAreErrorsNamingThem) {
  const std::string base =
      R"("model_type": "gemma2", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 12,
         "num_hidden_layers": 2, "num_attention_heads": 2, "head_dim": 4,
         "max_position_embeddings": 16, "rms_norm_eps": 1e-6)";
  auto parse = [&](const std::string& extra) {
    return error_of([&] { LlamaConfig::from_json_text("{" + base + extra + "}", "c.json"); });
  };
  EXPECT_EQ(parse(""), "");
  for (const auto& [extra, field] : std::vector<std::pair<std::string, std::string>>{
           {R"(, "attention_bias": true)", "attention_bias"},
           {R"(, "hidden_activation": "relu")", "hidden_activation"},
           {R"(, "attn_logit_softcapping": -1)", "attn_logit_softcapping"},
           {R"(, "final_logit_softcapping": "30")", "final_logit_softcapping"},
           {R"(, "query_pre_attn_scalar": 0)", "query_pre_attn_scalar"},
           {R"(, "sliding_window": 4.5)", "sliding_window"},
           {R"(, "layer_types": ["sliding_attention"])", "layer_types"},
           {R"(, "layer_types": ["sliding_attention", "chunked_attention"])", "layer_types"},
           {R"(, "rope_scaling": {"rope_type": "yarn"})", "rope_scaling"}}) {
    const std::string message = parse(extra);
    EXPECT_NE(message.find(field), std::string::npos) << extra << ": " << message;
  }
  // transformers' defaults where a field is absent, none where it is null.
  const LlamaConfig d = LlamaConfig::from_json_text("{" + base + "}", "c.json");
  EXPECT_EQ(d.query_pre_attn_scalar, 256);
  EXPECT_EQ(d.attn_logit_softcapping, 50);
  EXPECT_EQ(d.final_logit_softcapping, 30);
  EXPECT_EQ(d.sliding_window, 4096);
  const LlamaConfig n =
      LlamaConfig::from_json_text("{" + base +
                                      R"(, "final_logit_softcapping": null, "sliding_window": null,
              "layer_types": ["full_attention", "sliding_attention"]})",
                                  "c.json");
  EXPECT_EQ(n.final_logit_softcapping, 0);
  EXPECT_EQ(n.window_of(0), 0);
  EXPECT_EQ(n.window_of(1), 0);
}

TEST(Gemma2, EveryCheckpointTensorIsAWeight) {
  Gemma2 f;
  EXPECT_EQ(f.model.weight_paths().size(), f.hf.size());
  for (const std::string& path : f.model.weight_paths()) EXPECT_TRUE(f.hf.count(path)) << path;
  EXPECT_TRUE(f.hf.count("layers.2.post_feedforward_layernorm.gamma"));
}

TEST(Gemma2, LogitsLossAndEveryGradient) {
  Gemma2 f;
  EXPECT_LT(max_relative_error(f.model.predict_on_batch(f.x), f.ref.load("logits")), 1e-5);
  f.model.compile(AdamW(), losses::sparse_categorical_crossentropy);
  const double expected = f.ref.load("loss").item();
  EXPECT_NEAR(f.model.test_on_batch(f.x, f.y), expected, 1e-5 * expected);
  for (const auto& [path, grad] : testing::loss_gradients(f.model, f.x, f.y))
    EXPECT_LT(max_relative_error(grad, f.expected("grad.", path, grad.shape())), 1e-4) << path;
}

// AdamW with clipping: the losses of every step and the weights after them,
// against PyTorch's on one device.
void check_gemma2_training(std::shared_ptr<Distribution> dist, const std::string& what) {
  Gemma2 f;
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

TEST(Gemma2, AdamWStepsOnOneDeviceAndMeshes) {
  check_gemma2_training(nullptr, "one device");
  for (const char* mesh : {"model=3", "data=2,model=2"}) {
    check_gemma2_training(megatron(mesh), std::string("megatron on ") + mesh);
    check_gemma2_training(autoshard(mesh), std::string("autoshard on ") + mesh);
  }
}

// Greedy generation over the (sharded) key-value cache continues the prompt
// as PyTorch's greedy loop does; 17 positions pass the window of 4.
TEST(Gemma2, GreedyGenerationMatchesPyTorch) {
  for (const char* mesh : {"", "model=3", "data=2,model=2"}) {
    for (bool auto_plan : {false, true}) {
      Gemma2 f;
      if (*mesh) f.model.set_distribution(auto_plan ? autoshard(mesh) : megatron(mesh));
      const Tensor prompt = f.ref.load("generate.prompt"), greedy = f.ref.load("generate.greedy");
      const Generation g = generate(f.model, {prompt.i32(), prompt.i32() + prompt.numel()},
                                    {.max_new_tokens = greedy.numel(), .temperature = 0});
      EXPECT_EQ(g.output_ids, std::vector<int32_t>(greedy.i32(), greedy.i32() + greedy.numel()))
          << (auto_plan ? "autoshard" : "megatron") << " on " << (*mesh ? mesh : "one device");
      if (!*mesh) break;
    }
  }
}

// The ids joined with `sep`.
std::string joined(const Tensor& ids, const char* sep) {
  std::string s;
  for (int64_t i = 0; i < ids.numel(); ++i) s += (i ? sep : "") + std::to_string(ids.i32()[i]);
  return s;
}

// The command line: greedy ids on model=3 as PyTorch's, and a predicted plan
// (soft caps and windows priced) for the same directory.
TEST(Gemma2, CommandLineGeneratesAndPredicts) {
  SafetensorsFile ref(kTestData + "/gemma2_reference.safetensors");
  const Tensor prompt = ref.load("generate.prompt"), greedy = ref.load("generate.greedy");
  const auto gen = cli_runner::run(
      "generate --model " + kDir + " --weights " + kDir + " --mesh model=3 --prompt-ids " +
      joined(prompt, ",") + " --temperature 0 --max-new-tokens " + std::to_string(greedy.numel()));
  ASSERT_EQ(gen.code, 0) << gen.output;
  EXPECT_NE(gen.output.find(joined(prompt, " ") + " " + joined(greedy, " ")), std::string::npos)
      << gen.output;
  const auto plan = cli_runner::run("plan --model " + kDir +
                                    " --mesh data=2,model=2 --batch 4 --seq 11 --predict "
                                    "--cluster a100-80g");
  ASSERT_EQ(plan.code, 0) << plan.output;
  EXPECT_NE(plan.output.find("layers.2.post_feedforward_layernorm.gamma"), std::string::npos);
  EXPECT_NE(plan.output.find("predicted on cluster"), std::string::npos) << plan.output;
}

// The planner prices what the caps add: a tanh a score in attention (both
// passes), a streaming op for the logits.
TEST(Gemma2, SoftCapsArePriced) {
  Graph g;
  Value q = g.parameter("q", {2, 16, 2, 2, 8}), k = g.parameter("k", {2, 16, 2, 8});
  Value v = g.parameter("v", {2, 16, 2, 8}), logits = g.parameter("logits", {2, 16, 83});
  auto flops = [&](Value x) {
    const Node& n = g.node(x.id);
    std::vector<Shape> in;
    for (int i : n.inputs) in.push_back(g.node(i).shape);
    return op_def(n.op).cost(n, CostShapes{in, n.shape}).flops;
  };
  const Value plain = ops::attention(q, k, v, true, 0.3, 4);
  const Value capped = ops::attention(q, k, v, true, 0.3, 4, 50);
  EXPECT_GT(flops(capped), flops(plain));
  EXPECT_GT(flops(ops::soft_cap(logits, 30)), 0);
  EXPECT_THROW(ops::soft_cap(logits, 0), Error);
}

class Gemma2Checkpoint : public testing::TempDirTest {};

// The saved directory's config.json keeps every Gemma 2 field: loaded back,
// the same weights give the same logits.
TEST_F(Gemma2Checkpoint, SaveAndLoadBackGiveTheSameModel) {
  Gemma2 f;
  const std::string out = (dir_ / "gemma2").string();
  save_hf_llama(dynamic_cast<Llama&>(f.model), out);
  const LlamaConfig again_config = llama_config_of(out);
  const LlamaConfig& c = *f.config.get_if<LlamaConfig>();
  EXPECT_EQ(again_config.layer_types, c.layer_types);
  EXPECT_EQ(again_config.attn_logit_softcapping, c.attn_logit_softcapping);
  EXPECT_EQ(again_config.final_logit_softcapping, c.final_logit_softcapping);
  EXPECT_EQ(again_config.query_pre_attn_scalar, c.query_pre_attn_scalar);
  EXPECT_EQ(again_config.sliding_window, c.sliding_window);
  std::unique_ptr<Model> again = LanguageModelConfig::of(out).build(f.x.dim(1), /*seed=*/5);
  load_language_model_weights(*again, out);
  EXPECT_LT(max_relative_error(again->predict_on_batch(f.x), f.ref.load("logits")), 1e-5);
}

}  // namespace
}  // namespace autoshard
