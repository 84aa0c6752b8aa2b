// KerasHub presets: the variable table of every backbone against the models
// built from the Hugging Face fixtures (tests/data/hf_*).
#include "autoshard/io/keras_hub.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

#include "autoshard/error.h"
#include "autoshard/io/bert_formats.h"
#include "autoshard/io/language_model.h"
#include "autoshard/nn/models/bert.h"

namespace autoshard {
namespace {

const std::string kData = AUTOSHARD_TEST_DATA;

keras_hub::Variables variables_of(const LanguageModelConfig& c) {
  if (const auto* g = std::get_if<GPT2Config>(&c.config)) return keras_hub::gpt2_variables(*g);
  if (const auto* o = std::get_if<OPTConfig>(&c.config)) return keras_hub::opt_variables(*o);
  return keras_hub::llama_variables(std::get<LlamaConfig>(c.config));
}

// Every weight of `model` is held by exactly one Keras variable (or is a
// zero weight), with the shape the table says; Keras paths and datasets are
// unique.
void expect_covers(Model& model, const keras_hub::Variables& v) {
  std::map<std::string, Shape> shapes;
  for (const std::string& p : model.weight_paths()) shapes[p] = model.gather_weight(p).shape();
  std::set<std::string> seen, paths, datasets;
  for (const keras_hub::Variable& var : v.variables) {
    EXPECT_TRUE(paths.insert(var.path).second) << var.path;
    EXPECT_TRUE(datasets.insert(var.h5_path + (var.task ? " task" : "")).second) << var.h5_path;
    if (var.weight.empty()) continue;
    ASSERT_TRUE(shapes.count(var.weight)) << var.weight << " (" << var.path << ")";
    EXPECT_TRUE(seen.insert(var.weight).second) << var.weight;
    EXPECT_EQ(var.weight_shape(), shapes[var.weight]) << var.weight;
    EXPECT_EQ(numel(var.split), numel(var.keras_shape)) << var.path;
    EXPECT_EQ(var.keras_dims().size(), var.perm.size()) << var.path;
  }
  for (const std::string& z : v.zero_weights) EXPECT_TRUE(seen.insert(z).second) << z;
  EXPECT_EQ(seen.size(), shapes.size());
}

class KerasHubVariables : public ::testing::TestWithParam<std::string> {};

TEST_P(KerasHubVariables, CoverEveryWeightOnce) {
  const LanguageModelConfig c = LanguageModelConfig::of(kData + "/hf_" + GetParam());
  std::unique_ptr<Model> model = c.build(8, 0);
  expect_covers(*model, variables_of(c));
}

INSTANTIATE_TEST_SUITE_P(Decoders, KerasHubVariables,
                         ::testing::Values("gpt2", "opt", "llama", "mistral", "qwen2", "gemma"));

TEST(KerasHubVariables, EncodersCoverEveryWeightOnce) {
  for (const char* name : {"bert", "roberta"}) {
    const BertConfig c = bert_config_of(kData + "/hf_" + name);
    Bert model(c, 8);
    expect_covers(model, keras_hub::bert_variables(c));
  }
}

TEST(KerasHubVariables, NamesFollowKerasHub) {
  const LanguageModelConfig c = LanguageModelConfig::of(kData + "/hf_llama");
  const keras_hub::Variables v = variables_of(c);
  EXPECT_EQ(v.class_name, "LlamaBackbone");
  const LlamaConfig& l = std::get<LlamaConfig>(c.config);
  for (const keras_hub::Variable& var : v.variables) {
    if (var.weight != "layers.1.self_attn.q_proj.kernel") continue;
    EXPECT_EQ(var.path, "transformer_layer_1/self_attention/query/kernel");
    EXPECT_EQ(var.h5_path,
              "layers/llama_transformer_decoder_1/_self_attention_layer/_query_dense/vars/0");
    EXPECT_EQ(var.keras_shape, (Shape{l.hidden_size, l.num_attention_heads,
                                      l.head_dim}));  // (hidden, heads, head_dim)
    // [kv heads, group, head_dim, hidden]: kv heads and group both lie in
    // the Keras heads dim, kv heads outermost.
    EXPECT_EQ(var.keras_dims(), (std::vector<int>{1, 1, 2, 0}));
    EXPECT_TRUE(var.major_in_keras_dim(0));
    EXPECT_FALSE(var.major_in_keras_dim(1));
  }
}

}  // namespace
}  // namespace autoshard
