// KerasHub presets: the variable table of every backbone against the models
// built from the Hugging Face fixtures (tests/data/hf_*), and the presets of
// tests/data/keras_hub (tools/make_keras_hub_presets.py) against them.
#include "autoshard/io/keras_hub.h"

#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/models/bert/bert.h"
#include "autoshard/models/bert/formats.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/models/language_model.h"
#include "autoshard/models/llama/formats.h"
#include "autoshard/models/opt/formats.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "cli_runner.h"
#include "io/keras_hub/blocks.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::error_of;

using testing::kTestData;

keras_hub::Variables variables_of(const LanguageModelConfig& c) {
  return c.keras_hub_variables();
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
  const LanguageModelConfig c = LanguageModelConfig::of(kTestData + "/hf_" + GetParam());
  std::unique_ptr<Model> model = c.build(8, 0);
  expect_covers(*model, variables_of(c));
}

INSTANTIATE_TEST_SUITE_P(Decoders, KerasHubVariables,
                         ::testing::Values("gpt2", "opt", "llama", "mistral", "qwen2", "gemma"));

TEST(KerasHubVariables, EncodersCoverEveryWeightOnce) {
  for (const char* name : {"bert", "roberta"}) {
    const BertConfig c = bert_config_of(kTestData + "/hf_" + name);
    Bert model(c, 8);
    expect_covers(model, keras_hub::bert_variables(c));
  }
}

TEST(KerasHubVariables, NamesFollowKerasHub) {
  const LanguageModelConfig c = LanguageModelConfig::of(kTestData + "/hf_llama");
  const keras_hub::Variables v = variables_of(c);
  EXPECT_EQ(v.class_name, "LlamaBackbone");
  const LlamaConfig& l = *c.get_if<LlamaConfig>();
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

// A decoder preset (tests/data/keras_hub/<name>) and the Hugging Face
// directory holding the same weights.
struct DecoderPair {
  std::string name;
  std::string preset = kTestData + "/keras_hub/" + name;
  std::string hf =
      kTestData + (name == "llama" || name == "gemma2" ? "/keras_hub/hf_" : "/hf_") + name;
  SafetensorsFile ref{kTestData + "/" + name + "_reference.safetensors"};
  Tensor x = ref.load("x"), y = ref.load("y");

  std::unique_ptr<Model> load(const std::string& dir, std::shared_ptr<Distribution> dist = {}) {
    std::unique_ptr<Model> m = LanguageModelConfig::of(dir).build(x.dim(1), 0);
    if (dist) m->set_distribution(dist);
    load_language_model_weights(*m, dir);
    return m;
  }
};

std::vector<double> adamw_losses(Model& m, const Tensor& x, const Tensor& y) {
  m.compile(AdamW({.learning_rate = 3e-3, .clipnorm = 1.0}),
            losses::sparse_categorical_crossentropy);
  std::vector<double> out;
  for (int step = 0; step < 3; ++step) out.push_back(m.train_on_batch(x, y));
  return out;
}

class KerasHubPreset : public ::testing::TestWithParam<std::string> {};

// Same weights, same logits, same training losses: on one device, and from
// the preset on meshes (each device reading its own hyperslabs).
TEST_P(KerasHubPreset, MatchesTheHuggingFaceDirectory) {
  DecoderPair p{GetParam()};
  std::unique_ptr<Model> hf = p.load(p.hf), preset = p.load(p.preset);
  for (const std::string& w : hf->weight_paths()) {
    Tensor a = preset->gather_weight(w), b = hf->gather_weight(w);
    if (w == "embed_positions.embeddings") {  // OPT never reads rows 0 and 1
      EXPECT_EQ(a.f32()[0], 0.0f);
      std::fill(b.f32(), b.f32() + 2 * b.dim(1), 0.0f);
    }
    EXPECT_EQ(max_relative_error(a, b), 0) << w;
  }
  const Tensor logits = hf->predict_on_batch(p.x);
  EXPECT_EQ(max_relative_error(preset->predict_on_batch(p.x), logits), 0);
  const std::vector<double> expected = adamw_losses(*hf, p.x, p.y);
  EXPECT_EQ(adamw_losses(*preset, p.x, p.y), expected);
  const LanguageModelConfig config = LanguageModelConfig::of(p.preset);
  for (const char* spec : {"model=3", "data=2,model=2"}) {
    auto dist = std::make_shared<ModelParallel>(DeviceMesh::parse(spec), config.megatron_layout());
    std::unique_ptr<Model> sharded = p.load(p.preset, dist);
    EXPECT_LT(max_relative_error(sharded->predict_on_batch(p.x), logits), 1e-5) << spec;
    const std::vector<double> losses = adamw_losses(*sharded, p.x, p.y);
    for (size_t i = 0; i < losses.size(); ++i)
      EXPECT_NEAR(losses[i], expected[i], 1e-5 * expected[i]) << spec << ", step " << i + 1;
  }
}

INSTANTIATE_TEST_SUITE_P(Decoders, KerasHubPreset,
                         ::testing::Values("gpt2", "opt", "llama", "mistral", "qwen2", "gemma",
                                           "gemma2"));

// A preset saved in bfloat16 (Keras's opaque 2-byte datasets) reads as the
// f32 preset's weights rounded to bfloat16: same weights, same logits, on one
// device and on model=3 (each device widening only its own hyperslabs).
TEST(KerasHubPreset, Bfloat16PresetIsTheRoundedFloat32One) {
  DecoderPair p{"gemma"};
  const std::string bf16 = kTestData + "/keras_hub/gemma_bf16";
  std::unique_ptr<Model> rounded = p.load(p.preset), preset = p.load(bf16);
  for (const std::string& w : rounded->weight_paths()) {
    Tensor t = rounded->gather_weight(w);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_float(float_to_bf16(t.f32()[i]));
    rounded->set_weight(w, t);
    EXPECT_EQ(max_relative_error(preset->gather_weight(w), t), 0) << w;
  }
  const Tensor logits = rounded->predict_on_batch(p.x);
  EXPECT_EQ(max_relative_error(preset->predict_on_batch(p.x), logits), 0);
  const LanguageModelConfig config = LanguageModelConfig::of(bf16);
  auto dist =
      std::make_shared<ModelParallel>(DeviceMesh::parse("model=3"), config.megatron_layout());
  EXPECT_LT(max_relative_error(p.load(bf16, dist)->predict_on_batch(p.x), logits), 1e-5);
}

// BERT and RoBERTa presets with their TextClassifier heads give PyTorch's
// logits (tests/data/<name>_reference.safetensors) on one device and model=3.
TEST(KerasHubPreset, TextClassifiersMatchPyTorch) {
  for (const char* name : {"bert", "roberta"}) {
    SafetensorsFile ref(kTestData + "/" + std::string(name) + "_reference.safetensors");
    const ModelInputs in = {{"token_ids", ref.load("token_ids")},
                            {"segment_ids", ref.load("segment_ids")},
                            {"padding_mask", ref.load("padding_mask")}};
    const std::string dir = kTestData + "/keras_hub/" + name;
    const BertConfig config = *config_as<BertConfig>(*keras_hub::preset_config(dir));
    for (const char* spec : {"", "model=3"}) {
      Bert model(config, ref.load("token_ids").dim(1));
      if (*spec)
        model.set_distribution(
            std::make_shared<ModelParallel>(DeviceMesh::parse(spec), bert_megatron_layout()));
      keras_hub::load_preset_weights(model, dir);
      EXPECT_LT(max_relative_error(model.predict_on_batch(in), ref.load("logits")), 1e-5)
          << name << " " << spec;
    }
  }
}

// A device's block, read as hyperslabs, is the block of the whole weight,
// for boxes that cut kv heads, the query group, both, or rows past a
// variable's row offset.
TEST(KerasHubBlocks, HyperslabReadsGiveTheWeightsBlock) {
  const LlamaConfig l = *LanguageModelConfig::of(kTestData + "/hf_gemma").get_if<LlamaConfig>();
  std::vector<keras_hub::Variable> vars = keras_hub::llama_variables(l).variables;
  for (const auto& v :
       keras_hub::opt_variables(*LanguageModelConfig::of(kTestData + "/hf_opt").get_if<OPTConfig>())
           .variables)
    vars.push_back(v);
  uint64_t seed = 1;
  for (const keras_hub::Variable& v : vars) {
    if (v.weight.empty()) continue;
    Tensor keras(v.keras_shape);
    for (int64_t i = 0; i < keras.numel(); ++i) keras.f32()[i] = float(i % 1009) + 0.5f;
    const Tensor whole = keras_hub::weight_value(v, keras);
    const Shape shape = whole.shape();
    for (int trial = 0; trial < 4; ++trial) {
      std::vector<int64_t> lo(shape.size());
      Shape n(shape.size());
      for (size_t d = 0; d < shape.size(); ++d) {
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        lo[d] = int64_t((seed >> 33) % uint64_t(shape[d]));
        n[d] = 1 + int64_t((seed >> 13) % uint64_t(shape[d] - lo[d]));
      }
      int64_t reads = 0;
      const Tensor block = keras_hub::read_weight_block(
          v, lo, n, [&](const std::vector<int64_t>& off, const Shape& count, float* dst) {
            ++reads;
            std::vector<int64_t> idx(count.size(), 0);
            for (int64_t k = 0; k < numel(count); ++k) {
              int64_t src = 0;
              for (size_t d = 0; d < count.size(); ++d)
                src = src * v.keras_shape[d] + off[d] + idx[d];
              dst[k] = keras.f32()[src];
              for (size_t d = count.size(); d-- > 0;)
                if (++idx[d] < count[d])
                  break;
                else
                  idx[d] = 0;
            }
          });
      ASSERT_EQ(block.shape(), n) << v.path;
      std::vector<int64_t> idx(n.size(), 0);
      for (int64_t k = 0; k < block.numel(); ++k) {
        int64_t src = 0;
        for (size_t d = 0; d < n.size(); ++d) src = src * shape[d] + lo[d] + idx[d];
        ASSERT_EQ(block.f32()[k], whole.f32()[src]) << v.path << " element " << k;
        for (size_t d = n.size(); d-- > 0;)
          if (++idx[d] < n[d])
            break;
          else
            idx[d] = 0;
      }
      EXPECT_LE(reads, numel(n)) << v.path;
    }
    EXPECT_EQ(max_relative_error(keras_hub::keras_value(v, whole), keras), 0) << v.path;
  }
}

// Tokenizers from a preset's assets give the Hugging Face files' ids, with
// KerasHub's start token (preprocessor.json's add_start_token).
TEST(KerasHubTokenizer, IdsEqualTheHuggingFaceTokenizers) {
  const std::string kh = kTestData + "/keras_hub/tokenizers/", hf = kTestData + "/tokenizers/";
  // SentencePiece: the library's ids with BOS (tests/data/tokenizers'
  // expected.json).
  const auto spm = keras_hub::load_preset_tokenizer(kh + "sentencepiece");
  std::ifstream in(hf + "sentencepiece/expected.json");
  for (const auto& e : nlohmann::json::parse(in))
    EXPECT_EQ(spm->encode(e.at("text").get<std::string>()), e.at("ids").get<std::vector<int32_t>>())
        << e.at("text");
  const std::vector<std::string> texts = {
      "Hello world", "the world's end",   "a  b\n",
      "é",           "Unaffable Worlds!", "Héllo, CAFÉ don't 中文的"};
  // GPT-2's byte-level BPE; KerasHub's GPT2CausalLMPreprocessor starts with
  // <|endoftext|>.
  const auto bpe = keras_hub::load_preset_tokenizer(kh + "gpt2");
  const auto bpe_hf = load_tokenizer(hf + "gpt2_files");
  for (const std::string& t : texts) {
    EXPECT_EQ(bpe->encode(t, false), bpe_hf->encode(t, false)) << t;
    std::vector<int32_t> with_start = bpe_hf->encode(t, false);
    with_start.insert(with_start.begin(), *bpe_hf->token_to_id("<|endoftext|>"));
    EXPECT_EQ(bpe->encode(t), with_start) << t;
  }
  // WordPiece with BERT's [CLS] ... [SEP].
  const auto wp = keras_hub::load_preset_tokenizer(kh + "wordpiece");
  const auto wp_hf = load_tokenizer(hf + "wordpiece_files");
  for (const std::string& t : texts) EXPECT_EQ(wp->encode(t), wp_hf->encode(t)) << t;
}

class KerasHubPresetErrors : public testing::TempDirTest {
 protected:
  // A copy of a preset whose config.json "config" is edited by `edit`.
  std::string edited(const std::string& name, const std::function<void(nlohmann::json&)>& edit,
                     const char* file = "config.json") {
    const std::filesystem::path d = dir_ / name;
    std::filesystem::copy(kTestData + "/keras_hub/" + name, d);
    nlohmann::json j = nlohmann::json::parse(std::ifstream(d / file));
    edit(j["config"]);
    std::ofstream(d / file) << j.dump();
    return d.string();
  }
  // The error of loading the preset in `dir` (config and weights).
  static std::string load_error(const std::string& dir) {
    return error_of([&] {
      std::unique_ptr<Model> m = LanguageModelConfig::of(dir).build(8, 0);
      load_language_model_weights(*m, dir);
      m->gather_weight(m->weight_paths().front());
    });
  }
};

// Renames, in an HDF5 file, every group named `from` to `to` (its parent
// kept): how a preset saved by another Keras version lays out the same
// layers. Written on libhdf5 directly, apart from the reader under test.
int rename_groups(const std::string& file, const std::map<std::string, std::string>& names) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  EXPECT_GE(f, 0) << file;
  std::vector<std::string> found;
  H5Ovisit(
      f, H5_INDEX_NAME, H5_ITER_NATIVE,
      [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
        if (info->type == H5O_TYPE_GROUP)
          static_cast<std::vector<std::string>*>(data)->push_back(name);
        return 0;
      },
      &found);
  int renamed = 0;
  // Deepest first, so that a parent's rename does not move a path still to do.
  std::sort(found.begin(), found.end(), [](const std::string& a, const std::string& b) {
    return std::count(a.begin(), a.end(), '/') > std::count(b.begin(), b.end(), '/');
  });
  for (const std::string& path : found) {
    const size_t slash = path.rfind('/');
    const std::string parent = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const auto it = names.find(path.substr(parent.size()));
    if (it == names.end()) continue;
    EXPECT_GE(H5Lmove(f, path.c_str(), f, (parent + it->second).c_str(), H5P_DEFAULT, H5P_DEFAULT),
              0);
    ++renamed;
  }
  H5Fclose(f);
  return renamed;
}

// Keras >= 3.3 stores MultiHeadAttention's sublayers under their public
// names (query_dense, ...), Keras 3.0-3.2 under the private ones
// (_query_dense, ...): a preset saved either way reads the same weights,
// and the writer writes what current Keras writes.
TEST_F(KerasHubPresetErrors, PresetsOfEitherKerasLayoutRead) {
  const std::map<std::string, std::string> to_public = {{"_query_dense", "query_dense"},
                                                        {"_key_dense", "key_dense"},
                                                        {"_value_dense", "value_dense"},
                                                        {"_output_dense", "output_dense"}};
  for (const char* name : {"gpt2", "opt"}) {
    DecoderPair p{name};
    const std::filesystem::path copy = dir_ / (std::string(name) + "_keras33");
    std::filesystem::copy(p.preset, copy);
    EXPECT_GT(rename_groups((copy / "model.weights.h5").string(), to_public), 0) << name;
    const Tensor logits = p.load(p.hf)->predict_on_batch(p.x);
    EXPECT_EQ(max_relative_error(p.load(copy.string())->predict_on_batch(p.x), logits), 0) << name;
    EXPECT_EQ(max_relative_error(p.load(p.preset)->predict_on_batch(p.x), logits), 0) << name;
  }
  // What the writer writes: the public names.
  DecoderPair gpt2{"gpt2"};
  const LanguageModelConfig cfg = LanguageModelConfig::of(gpt2.hf);
  const std::string out = (dir_ / "written").string();
  keras_hub::save_preset(*gpt2.load(gpt2.hf), *cfg.config, out,
                         kTestData + "/keras_hub/tokenizers/sentencepiece");
  const std::map<std::string, std::string> to_private = {{"query_dense", "_query_dense"}};
  EXPECT_GT(rename_groups(out + "/model.weights.h5", to_private), 0);
  // Neither layout: the error names both paths and what the group holds.
  const std::map<std::string, std::string> gone = {{"_query_dense", "query_proj"}};
  rename_groups(out + "/model.weights.h5", gone);
  const std::string e = load_error(out);
  EXPECT_NE(e.find("/_self_attention_layer/query_dense/vars/0' (nor '"), std::string::npos) << e;
  EXPECT_NE(e.find("_self_attention_layer' holds: "), std::string::npos) << e;
  EXPECT_NE(e.find("query_proj"), std::string::npos) << e;
}

// A preset written by save_preset reads back to the same weights, from a
// preset (its tokenizer copied) and from a Hugging Face directory; RoBERTa's
// token-type row goes into the positions (KerasHub has no token types).
TEST_F(KerasHubPresetErrors, SavedPresetsReadBack) {
  for (const char* name : {"gemma", "gemma2", "llama", "opt", "gpt2"}) {
    DecoderPair p{name};
    std::unique_ptr<Model> hf = p.load(p.hf);
    const LanguageModelConfig cfg = LanguageModelConfig::of(p.hf);
    const std::string out = (dir_ / name).string();
    keras_hub::save_preset(*hf, *cfg.config, out,
                           kTestData + "/keras_hub/tokenizers/sentencepiece");
    EXPECT_TRUE(std::filesystem::exists(dir_ / name / "assets" / "tokenizer" / "vocabulary.spm"));
    std::unique_ptr<Model> back = p.load(out);
    EXPECT_EQ(max_relative_error(back->predict_on_batch(p.x), hf->predict_on_batch(p.x)), 0)
        << name;
  }
  SafetensorsFile ref(kTestData + "/roberta_reference.safetensors");
  const ModelInputs in = {{"token_ids", ref.load("token_ids")},
                          {"segment_ids", ref.load("segment_ids")},
                          {"padding_mask", ref.load("padding_mask")}};
  const BertConfig c = bert_config_of(kTestData + "/hf_roberta");
  Bert hf(c, ref.load("token_ids").dim(1));
  load_bert_weights(hf, kTestData + "/hf_roberta");
  keras_hub::save_preset(hf, *config_of_model(hf), (dir_ / "roberta").string());
  Bert back(*config_as<BertConfig>(*keras_hub::preset_config((dir_ / "roberta").string())),
            ref.load("token_ids").dim(1));
  keras_hub::load_preset_weights(back, (dir_ / "roberta").string());
  EXPECT_LT(max_relative_error(back.predict_on_batch(in), ref.load("logits")), 1e-5);
}

TEST_F(KerasHubPresetErrors, AnUnsupportedFieldIsNamed) {
  const std::string e = load_error(edited("gemma", [](auto& c) { c["use_bidirectional"] = true; }));
  EXPECT_NE(e.find("\"use_bidirectional\" is not supported"), std::string::npos) << e;
  const std::string drop = load_error(edited("llama", [](auto& c) { c["dropout"] = 0.1; }));
  EXPECT_NE(drop.find("\"dropout\""), std::string::npos) << drop;
  const std::string win =
      load_error(edited("qwen2", [](auto& c) { c["rope_scaling_factor"] = 2; }));
  EXPECT_NE(win.find("rope_scaling_factor"), std::string::npos) << win;
}

TEST_F(KerasHubPresetErrors, AShapeMismatchNamesTheDataset) {
  const std::string e = load_error(edited("mistral", [](auto& c) { c["vocabulary_size"] = 100; }));
  EXPECT_NE(e.find("layers/reversible_embedding/vars/0"), std::string::npos) << e;
  EXPECT_NE(e.find("token_embedding/embeddings"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// An opaque 2-byte dataset without Keras's dtype="bfloat16" tag is not
// guessed at: a one-line error naming the dataset.
TEST_F(KerasHubPresetErrors, AnUntaggedOpaqueDatasetIsNamed) {
  const std::string d = edited("gemma_bf16", [](auto& c) { (void)c; });
  const std::string h5 = d + "/model.weights.h5";
  const hid_t f = H5Fopen(h5.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  EXPECT_GE(H5Adelete_by_name(f, "layers/reversible_embedding/vars/0", "dtype", H5P_DEFAULT), 0);
  H5Fclose(f);
  const std::string e = load_error(d);
  EXPECT_NE(e.find("layers/reversible_embedding/vars/0"), std::string::npos) << e;
  EXPECT_NE(e.find("not a float dataset"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST_F(KerasHubPresetErrors, AnotherBackboneOrTaskIsNamed) {
  const std::string e = load_error(edited("gpt2", [](auto& c) { (void)c; }));
  EXPECT_EQ(e, "");
  std::filesystem::path d = dir_ / "other";
  std::filesystem::copy(kTestData + "/keras_hub/gpt2", d);
  nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "task.json"));
  j["class_name"] = "GPT2Seq2SeqLM";
  std::ofstream(d / "task.json") << j.dump();
  EXPECT_NE(load_error(d.string()).find("GPT2Seq2SeqLM"), std::string::npos);
  j = nlohmann::json::parse(std::ifstream(d / "config.json"));
  j["class_name"] = "FalconBackbone";
  std::ofstream(d / "config.json") << j.dump();
  EXPECT_NE(load_error(d.string()).find("FalconBackbone"), std::string::npos);
}

// The command line takes a preset wherever it takes a Hugging Face
// directory: generate on model=3 gives the directory's ids, convert goes to
// Hugging Face and back, train --save writes a preset.
TEST_F(KerasHubPresetErrors, CommandLineTakesPresets) {
  const std::string preset = kTestData + "/keras_hub/llama", hf = kTestData + "/keras_hub/hf_llama";
  const std::string gen = " --prompt-ids 3,17,101,64 --max-new-tokens 6 --temperature 0";
  const auto a = cli_runner::run("generate --weights " + preset + gen + " --mesh model=3");
  const auto b = cli_runner::run("generate --weights " + hf + gen);
  ASSERT_EQ(a.code, 0) << a.output;
  EXPECT_EQ(a.output.substr(0, a.output.find('\n')), b.output.substr(0, b.output.find('\n')));
  const std::string to_hf = (dir_ / "hf").string(), back = (dir_ / "back").string();
  EXPECT_EQ(cli_runner::run("convert " + preset + " " + to_hf).code, 0);
  EXPECT_EQ(cli_runner::run("convert " + to_hf + " " + back + " --keras-hub").code, 0);
  const auto c = cli_runner::run("generate --weights " + back + gen + " --mesh data=2,model=2");
  EXPECT_EQ(c.output.substr(0, c.output.find('\n')), b.output.substr(0, b.output.find('\n')));
  std::ofstream((dir_ / "tokens.bin").string(), std::ios::binary)
      << std::string(400, char(7));  // uint16 id 1799 would be out of range: bytes 7,7 = 1799
  const auto bad = cli_runner::run("train --weights " + preset + " --data " +
                                   (dir_ / "tokens.bin").string() + " --steps 1 --batch 2 --seq 8");
  EXPECT_EQ(cli_runner::count(bad.output, "autoshard: error:"), 1) << bad.output;
  std::ofstream((dir_ / "ok.bin").string(), std::ios::binary) << std::string(400, char(0));
  const std::string saved = (dir_ / "trained").string();
  const auto t =
      cli_runner::run("train --weights " + preset + " --data " + (dir_ / "ok.bin").string() +
                      " --steps 2 --batch 2 --seq 8 --mesh model=3 --save " + saved);
  ASSERT_EQ(t.code, 0) << t.output;
  EXPECT_TRUE(keras_hub::is_preset(saved));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "trained" / "model.weights.h5"));
  const auto again =
      cli_runner::run("train --weights " + preset + " --data " + (dir_ / "ok.bin").string() +
                      " --steps 1 --batch 2 --seq 8 --save " + saved);
  EXPECT_NE(again.output.find("--save"), std::string::npos) << again.output;
  EXPECT_EQ(cli_runner::count(again.output, "autoshard: error:"), 1) << again.output;
}

}  // namespace
}  // namespace autoshard
