// Generation over the key-value cache: each cached step's logits equal the
// full forward pass's at the same position (GPT-2 and the Llama fixture, on
// one device and on meshes that split the heads, evenly or not), sampling
// is deterministic per seed and the same on every mesh, and the sampling
// rules (greedy, temperature, top-k, top-p) choose what they promise.
#include "autoshard/nn/generation.h"

#include <gtest/gtest.h>

#include <map>

#include "autoshard/error.h"
#include "autoshard/models/gpt2/gpt2.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/llama/llama.h"
#include "autoshard/tensor/array_split.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kTestData;

// Logits [T, V] of `row` [1, T] fed to the cache as a prefill of `prefill`
// tokens, then one token at a time.
Tensor cached_logits(Model& model, const Tensor& row, int64_t prefill) {
  const int64_t T = row.dim(1);
  std::vector<Tensor> parts;
  parts.push_back(model.predict_cached(slice_axis(row, 1, 0, prefill), 0, T));
  for (int64_t i = prefill; i < T; ++i)
    parts.push_back(model.predict_cached(slice_axis(row, 1, i, 1), i, T));
  return concatenate(parts, 1);
}

std::shared_ptr<Distribution> distribution_for(const std::string& plan, const char* mesh,
                                               const LayoutMap& megatron) {
  if (plan == "one device") return nullptr;
  const DeviceMesh m = DeviceMesh::parse(mesh);
  if (plan == "megatron") return std::make_shared<ModelParallel>(m, megatron);
  if (plan == "data") return std::make_shared<DataParallel>(m);
  if (plan == "fsdp") return std::make_shared<FullyShardedDataParallel>(m, megatron);
  return std::make_shared<AutoShard>(m, "data", AutoShardOptions{.time_limit_s = 0.2});
}

struct GenerationCase {
  std::string plan;
  const char* mesh;
};
const std::vector<GenerationCase> kCases = {
    {"one device", ""},        {"megatron", "model=3"}, {"megatron", "model=4"},
    {"auto", "model=3"},       {"data", "data=2"},      {"megatron", "data=2,model=2"},
    {"fsdp", "data=2,model=2"}};

TEST(Generation, LlamaCachedStepsMatchTheFullForwardPass) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  const int64_t T = 9;
  const Tensor row = testing::random_ids({1, T}, int32_t(config.vocab_size), 5);
  Llama reference(config, T);
  load_llama_weights(reference, kTestData + "/hf_llama");
  const Tensor expected = reference.predict_on_batch(row);
  for (const GenerationCase& c : kCases) {
    Llama model(config, T);
    load_llama_weights(model, kTestData + "/hf_llama");
    if (auto d = distribution_for(c.plan, c.mesh, llama_megatron_layout(config)))
      model.set_distribution(d);
    EXPECT_LT(max_relative_error(cached_logits(model, row, 4), expected), 1e-5)
        << c.plan << " " << c.mesh;
  }
}

TEST(Generation, Gpt2CachedStepsMatchTheFullForwardPass) {
  const GPT2Config config = GPT2Config::preset("test");
  const int64_t T = 7;
  const Tensor row = testing::random_ids({1, T}, int32_t(config.vocab_size), 3);
  GPT2 reference(config, T, 11);
  const Tensor expected = reference.predict_on_batch(row);
  for (const GenerationCase& c : kCases) {
    GPT2 model(config, T, 11);
    if (auto d = distribution_for(c.plan, c.mesh, gpt2_megatron_layout()))
      model.set_distribution(d);
    EXPECT_LT(max_relative_error(cached_logits(model, row, 3), expected), 1e-5)
        << c.plan << " " << c.mesh;
  }
}

TEST(Generation, TheCacheIsSplitLikeTheHeads) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  Llama model(config, 8);
  EXPECT_EQ(model.buffer_paths().size(), 2 * size_t(config.num_hidden_layers));
  EXPECT_EQ(model.buffer_paths().front(), "layers.0.self_attn.key_cache");
  const LayoutMap map = llama_megatron_layout(config);
  EXPECT_TRUE(map.unmatched(model.buffer_paths()).size() < map.entries().size());
  const ModelParallel mp(DeviceMesh::parse("model=2"), map);
  const Sharding s = mp.buffer_layout("layers.1.self_attn.value_cache", {1, 8, 2, 6});
  EXPECT_EQ(s.dims, (std::vector<int>{-1, -1, 0, -1}));
  // FSDP splits weights over the data axis, not the cache's length.
  const FullyShardedDataParallel fsdp(DeviceMesh::parse("data=2,model=2"), map);
  EXPECT_EQ(fsdp.buffer_layout("layers.1.self_attn.value_cache", {1, 8, 2, 6}).dims,
            (std::vector<int>{-1, -1, 1, -1}));
}

TEST(Generation, SamplingIsTheSameOnEveryMeshForASeed) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  const std::vector<int32_t> prompt = {3, 17, 101, 64};
  const GenerationOptions o{
      .max_new_tokens = 8, .temperature = 1.5, .top_k = 50, .top_p = 0.95, .seed = 42};
  std::vector<int32_t> first;
  for (const GenerationCase& c : kCases) {
    Llama model(config, 16);
    load_llama_weights(model, kTestData + "/hf_llama");
    if (auto d = distribution_for(c.plan, c.mesh, llama_megatron_layout(config)))
      model.set_distribution(d);
    std::vector<int32_t> streamed;
    const Generation g = generate(model, prompt, o, [&](int32_t t) { streamed.push_back(t); });
    EXPECT_EQ(g.output_ids.size(), 8u);
    EXPECT_EQ(streamed, g.output_ids);
    if (first.empty()) first = g.output_ids;
    EXPECT_EQ(g.output_ids, first) << c.plan << " " << c.mesh;
  }
  // Another seed draws another continuation (8 draws from ~131 tokens).
  Llama model(config, 16);
  load_llama_weights(model, kTestData + "/hf_llama");
  GenerationOptions other = o;
  other.seed = 43;
  EXPECT_NE(generate(model, prompt, other).output_ids, first);
}

TEST(Generation, GreedyFollowsTheFullForwardArgmax) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  Llama model(config, 16);
  load_llama_weights(model, kTestData + "/hf_llama");
  std::vector<int32_t> tokens = {5, 9, 2};
  const Generation g = generate(model, tokens, {.max_new_tokens = 6, .temperature = 0});
  // The same continuation without a cache: the whole sequence each time.
  for (int32_t produced : g.output_ids) {
    const int64_t T = int64_t(tokens.size());
    Llama full(config, T);
    load_llama_weights(full, kTestData + "/hf_llama");
    const Tensor logits = full.predict_on_batch(Tensor::from({1, T}, tokens));
    const int64_t V = logits.dim(2);
    const float* last = logits.f32() + (T - 1) * V;
    EXPECT_EQ(produced, std::max_element(last, last + V) - last);
    tokens.push_back(produced);
  }
}

TEST(Generation, StopsAfterAStopToken) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  Llama model(config, 16);
  load_llama_weights(model, kTestData + "/hf_llama");
  const std::vector<int32_t> prompt = {5, 9, 2};
  GenerationOptions o{.max_new_tokens = 6, .temperature = 0};
  const std::vector<int32_t> all = generate(model, prompt, o).output_ids;
  ASSERT_EQ(all.size(), 6u);
  o.stop_token_ids = {all[2]};
  const std::vector<int32_t> stopped = generate(model, prompt, o).output_ids;
  const size_t first = std::find(all.begin(), all.end(), all[2]) - all.begin();
  EXPECT_EQ(stopped, std::vector<int32_t>(all.begin(), all.begin() + first + 1));
}

TEST(Generation, ChoosingRules) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
  std::mt19937_64 rng(0);
  EXPECT_EQ(choose_token(logits, {.temperature = 0}, rng), 1);  // the first of the largest
  // top_k = 1 and a tiny top_p keep only the most likely token.
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(choose_token(logits, {.temperature = 1, .top_k = 1}, rng), 1);
    EXPECT_EQ(choose_token(logits, {.temperature = 1, .top_p = 0.01}, rng), 1);
  }
  // top_k = 3 never draws the two least likely; frequencies follow softmax.
  std::map<int32_t, int> counts;
  const int draws = 20000;
  for (int i = 0; i < draws; ++i) ++counts[choose_token(logits, {.top_k = 3}, rng)];
  EXPECT_EQ(counts.count(0) + counts.count(4), 0u);
  const double e2 = std::exp(-1.0), p_top = 1 / (2 + e2);  // tokens 1 and 3 tie
  EXPECT_NEAR(counts[1] / double(draws), p_top, 0.015);
  EXPECT_NEAR(counts[2] / double(draws), e2 / (2 + e2), 0.015);
  // top_p = 0.6: the two tied leaders carry 0.42 + 0.42 of the mass: both
  // kept, token 2 (0.16) dropped.
  counts.clear();
  for (int i = 0; i < 2000; ++i) ++counts[choose_token(logits, {.top_p = 0.6}, rng)];
  EXPECT_EQ(counts.size(), 2u);
  // The same seed, the same draws.
  std::mt19937_64 a(7), b(7);
  for (int i = 0; i < 50; ++i)
    EXPECT_EQ(choose_token(logits, {.temperature = 0.7}, a),
              choose_token(logits, {.temperature = 0.7}, b));
}

TEST(Generation, NonFiniteLogitsAreErrorsNotTokenZero) {
  std::mt19937_64 rng(0);
  for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    const std::vector<float> logits = {1.0f, 2.0f, bad, 0.5f};
    for (double temperature : {0.0, 1.0})
      EXPECT_THROW(choose_token(logits, {.temperature = temperature}, rng), Error);
  }
}

TEST(Generation, BadRequestsAreErrors) {
  const LlamaConfig config = llama_config_of(kTestData + "/hf_llama");
  Llama model(config, 8);
  EXPECT_THROW(generate(model, {}, {}), Error);
  EXPECT_THROW(generate(model, {1}, {.temperature = -1}), Error);
  EXPECT_THROW(generate(model, {1}, {.top_p = 0}), Error);
  EXPECT_THROW(generate(model, {1, 2}, {.max_new_tokens = 5, .cache_length = 4}), Error);
  EXPECT_THROW(model.predict_cached(Tensor::from_ints({1, 2}, {1, 2}), 3, 4), Error);
  // Past the model's positions.
  EXPECT_THROW(
      generate(model, {1}, {.max_new_tokens = int64_t(config.max_position_embeddings) + 1}), Error);
}

}  // namespace
}  // namespace autoshard
