// Keras files read by load_keras_model: the TensorFlow.js fixtures of
// tests/data/keras_layers (model.json + weight shards) against their
// recorded predictions, on one device and on meshes; the real Keras 3
// `.keras` and legacy `.h5` files of ../shared/keras-files (skipped when
// absent); and the safety checks (code refused, unsafe archives refused).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "io/keras/hdf5_file.h"
#include "io/zip_archive.h"
#include "keras_fixtures.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::keras_fixture_index;
using testing::keras_fixture_inputs;
using testing::keras_fixture_spec;
using testing::kKerasFileFixtures;
using testing::kKerasLayerFixtures;
using testing::kSharedKerasFiles;

using testing::random_tensor;
using testing::ScratchDir;

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const json& m : keras_fixture_index().at("models")) names.push_back(m.at("name"));
  return names;
}

// A fixture made with a custom TF.js layer (the fixtures' stand-ins for
// Keras 3 behaviour TF.js lacks) is refused with the class named.
bool uses_custom_layer(const std::string& name) {
  std::ifstream in(kKerasLayerFixtures + "/tfjs/" + name + ".json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const char* c : {"KerasConv", "GRUResetAfter", "KerasAveragePooling", "KerasUpSampling2D",
                        "KerasHardSigmoid"})
    if (text.find(std::string("\"") + c + "\"") != std::string::npos) return true;
  return false;
}

class TfjsFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TfjsFixture, PredictionsMatchTensorFlowJs) {
  const std::string name = GetParam();
  const std::string path = kKerasLayerFixtures + "/tfjs/" + name + ".json";
  if (uses_custom_layer(name)) {
    try {
      load_keras_model(path);
      ADD_FAILURE() << name << " loaded although it uses a custom TF.js layer";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("is not supported"), std::string::npos) << e.what();
    }
    return;
  }
  const json& spec = keras_fixture_spec(name);
  SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
  std::optional<KerasModel> loaded;
  try {
    loaded.emplace(load_keras_model(path));
  } catch (const Error& e) {
    if (std::string(e.what()).find("is not supported yet") == std::string::npos) throw;
    GTEST_SKIP() << e.what();
  }
  KerasModel& k = *loaded;
  EXPECT_EQ(k.format, "tfjs");
  ASSERT_EQ(k.inputs.size(), spec.at("inputs").size());
  const std::vector<Tensor> got = k.model->predict_outputs(keras_fixture_inputs(spec, ref), 64);
  ASSERT_EQ(got.size(), spec.at("outputs").size());
  for (size_t i = 0; i < got.size(); ++i) {
    const Tensor want = ref.load("output/" + std::string(spec.at("outputs").at(i)));
    EXPECT_LT(max_relative_error(got[i], want.reshaped(got[i].shape())), 1e-5) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Keras, TfjsFixture, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

// On meshes each device reads its own block of each weight from the shards.
TEST(KerasFiles, TfjsOnMeshes) {
  for (const std::string name : {"resnet_cnn", "siamese", "lstm_language_model", "two_outputs"}) {
    if (uses_custom_layer(name)) continue;
    const json& spec = keras_fixture_spec(name);
    SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
    for (const char* mesh : {"model=3", "data=2,model=2"}) {
      KerasModel k = load_keras_model(kKerasLayerFixtures + "/tfjs/" + name + ".json");
      k.model->set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data",
                                                            AutoShardOptions{.time_limit_s = 0.1}));
      const std::vector<Tensor> got = k.model->predict_outputs(keras_fixture_inputs(spec, ref), 64);
      for (size_t i = 0; i < got.size(); ++i) {
        const Tensor want = ref.load("output/" + std::string(spec.at("outputs").at(i)));
        EXPECT_LT(max_relative_error(got[i], want.reshaped(got[i].shape())), 1e-5)
            << name << " on " << mesh;
      }
    }
  }
}

// The real files other people's Keras wrote: they load, run forward on a
// mesh as on one device, and their compile configs read.
TEST(KerasFiles, RealKerasFiles) {
  if (!fs::exists(kSharedKerasFiles)) GTEST_SKIP() << "no " << kSharedKerasFiles;
  for (const std::string file : {"fashion_cnn.keras", "gru_forecast.keras", "bi_lstm.keras",
                                 "cnn_lstm_forecast.keras", "next_word_lstm.h5", "lenet5.h5"}) {
    SCOPED_TRACE(file);
    KerasLoadOptions o;
    o.inference = true;
    KerasModel k = load_keras_model(kSharedKerasFiles + "/" + file, o);
    ASSERT_EQ(k.inputs.size(), 1u);
    EXPECT_TRUE(k.compile.present);
    if (!k.compile.optimizer.empty()) {
      EXPECT_NO_THROW(k.compile.make_optimizer());
    }
    EXPECT_NO_THROW(k.compile.make_losses());
    Shape shape = k.inputs[0].shape;
    shape.insert(shape.begin(), 3);
    Tensor x(shape, k.inputs[0].dtype);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.dtype() == DType::I32)
        x.i32()[i] = static_cast<int32_t>(i % 7);
      else
        x.f32()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    }
    const Tensor one = k.model->predict(x);
    for (int64_t i = 0; i < one.numel(); ++i) ASSERT_TRUE(std::isfinite(one.f32()[i]));
    KerasModel sharded = load_keras_model(kSharedKerasFiles + "/" + file, o);
    sharded.model->set_distribution(std::make_shared<AutoShard>(
        DeviceMesh::parse("model=3"), "data", AutoShardOptions{.time_limit_s = 0.1}));
    EXPECT_LT(max_relative_error(sharded.model->predict(x), one), 1e-5);
  }
}

// A float tensor of nested JSON lists (the families' reference.json).
Tensor family_tensor(const json& nested) {
  std::vector<float> flat;
  Shape shape;
  std::function<void(const json&, size_t)> walk = [&](const json& v, size_t depth) {
    if (!v.is_array()) {
      flat.push_back(v.get<float>());
      return;
    }
    if (shape.size() == depth) shape.push_back(static_cast<int64_t>(v.size()));
    for (const json& e : v) walk(e, depth + 1);
  };
  walk(nested, 0);
  Tensor t(shape);
  std::copy(flat.begin(), flat.end(), t.f32());
  return t;
}

// Files as Keras 2 and TF.js wrote them (docs/keras-files.md): Keras 2's
// hard_sigmoid, a ReLU with max_value null, Keras 2.15's Windows .keras
// (backslash group names); each predicts TF.js's recorded outputs
// (tools/keras_fixtures/file_families.mjs), on one device and on model=3.
TEST(KerasFiles, Keras2AndTfjsFamilies) {
  const std::string dir = kKerasFileFixtures + "/families";
  const std::vector<std::pair<std::string, std::string>> files = {
      {"hard_sigmoid_dense/model.json", "hard_sigmoid_dense"},
      {"hard_sigmoid_dense.h5", "hard_sigmoid_dense"},
      {"recurrent_keras2_gates/model.json", "recurrent_keras2_gates"},
      {"recurrent_keras2_gates.h5", "recurrent_keras2_gates"},
      {"relu_max_value_null/model.json", "relu_max_value_null"},
      {"relu_max_value_null.h5", "relu_max_value_null"},
      {"conv1d_lstm_windows.keras", "conv1d_lstm"},
      {"conv_lstm2d/model.json", "conv_lstm2d"}};
  for (const auto& [file, name] : files) {
    SCOPED_TRACE(file);
    std::ifstream in(dir + "/" + name + "/reference.json");
    const json ref = json::parse(in);
    const Tensor x = family_tensor(ref.at("x")), want = family_tensor(ref.at("predictions"));
    for (const char* mesh : {"", "model=3"}) {
      KerasModel k = load_keras_model(dir + "/" + file);
      if (*mesh)
        k.model->set_distribution(std::make_shared<AutoShard>(
            DeviceMesh::parse(mesh), "data", AutoShardOptions{.time_limit_s = 0.1}));
      EXPECT_LT(max_relative_error(k.model->predict(x), want), 1e-4) << mesh;
    }
  }
}

// A .keras file as Keras 3 writes an image model with augmentation, an
// adapted Normalization (mean, variance and the int64 count) and CenterCrop
// (tools/keras_files/make_family_files.py) predicts as Keras does in
// inference: the random layers pass images through, the statistics
// normalize, the crop keeps the centre. The reference is computed here
// from the loaded weights; training it is refused, naming the layer.
TEST(KerasFiles, PreprocessingLayersPredictAsInInference) {
  const std::string file = kKerasFileFixtures + "/families/keras3_preprocessing.keras";
  const Tensor x = random_tensor({4, 6, 6, 2}, 3);
  KerasModel one = load_keras_model(file);
  const Tensor mean = one.model->gather_weight("normalization.mean");
  const Tensor variance = one.model->gather_weight("normalization.variance");
  const Tensor kernel = one.model->gather_weight("dense.kernel");
  const Tensor bias = one.model->gather_weight("dense.bias");
  ASSERT_EQ(kernel.shape(), (Shape{32, 3}));
  Tensor want({4, 3});
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t o = 0; o < 3; ++o) {
      double sum = bias.f32()[o];
      for (int64_t i = 0; i < 4; ++i)
        for (int64_t j = 0; j < 4; ++j)
          for (int64_t c = 0; c < 2; ++c) {
            const int64_t at = ((b * 6 + i + 1) * 6 + j + 1) * 2 + c;
            const double v = (x.f32()[at] - mean.f32()[c]) / std::sqrt(variance.f32()[c]);
            sum += v * kernel.f32()[((i * 4 + j) * 2 + c) * 3 + o];
          }
      want.f32()[b * 3 + o] = static_cast<float>(sum);
    }
  for (const char* mesh : {"", "model=3", "data=2,model=2"}) {
    KerasModel k = load_keras_model(file);
    if (*mesh)
      k.model->set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data",
                                                            AutoShardOptions{.time_limit_s = 0.1}));
    EXPECT_LT(max_relative_error(k.model->predict(x), want), 1e-5) << mesh;
  }
  one.model->compile(SGD(), losses::mean_squared_error);
  try {
    one.model->train_on_batch(x, want);
    ADD_FAILURE() << "trained through RandomFlip";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RandomFlip layer 'random_flip'"), std::string::npos)
        << e.what();
  }
}

// Normalization's int count (Keras 3's vars/2; Keras 2 lists "count:0"
// after mean and variance among the layer's weights) is kept as the file
// has it and written back: Keras compares a layer's number of variables
// with the file's when it loads (Layer.load_own_variables; Keras 2's
// load_weights), so a file without it would not load there. A tf-keras
// 2.15 .h5 (tools/keras_files/make_family_files.py) predicts from its
// statistics; its count, 50, and the Keras 3 fixture's, 120, survive saves
// to .keras and .h5, as libhdf5 reads the written datasets.
TEST(KerasFiles, NormalizationCountIsKeptThroughSaves) {
  const std::string dir = kKerasFileFixtures + "/families";
  KerasModel k2 = load_keras_model(dir + "/keras2_normalization.h5");
  ASSERT_EQ(k2.counters.size(), 1u);
  EXPECT_EQ(k2.counters[0].value, 50);
  const Tensor x = random_tensor({5, 3}, 7);
  const Tensor kernel = k2.model->gather_weight("dense.kernel");
  const Tensor bias = k2.model->gather_weight("dense.bias");
  const float mean[3] = {0.5f, -1.0f, 2.0f}, sd[3] = {2.0f, 0.5f, 3.0f};
  Tensor want({5, 2});
  for (int64_t b = 0; b < 5; ++b)
    for (int64_t o = 0; o < 2; ++o) {
      double sum = bias.f32()[o];
      for (int64_t i = 0; i < 3; ++i)
        sum += (x.f32()[b * 3 + i] - mean[i]) / sd[i] * kernel.f32()[i * 2 + o];
      want.f32()[b * 2 + o] = static_cast<float>(sum);
    }
  EXPECT_LT(max_relative_error(k2.model->predict(x), want), 1e-5);

  KerasModel k3 = load_keras_model(dir + "/keras3_preprocessing.keras");
  ASSERT_EQ(k3.counters.size(), 1u);
  EXPECT_EQ(k3.counters[0].value, 120);
  ScratchDir out("keras_normalization_count");
  for (auto [k, count] : {std::pair<KerasModel*, int64_t>{&k2, 50}, {&k3, 120}}) {
    const fs::path keras = out.path / (std::to_string(count) + ".keras");
    const fs::path h5 = out.path / (std::to_string(count) + ".h5");
    save_keras_model(*k, keras.string());
    save_keras_model(*k, h5.string());
    ZipArchive zip(keras.string());
    auto weights = keras::H5File::open(zip.open_member("model.weights.h5"), "model.weights.h5");
    EXPECT_EQ(weights->read_int("layers/normalization/vars/2"), count);
    auto legacy = keras::H5File::open(h5.string(), "h5");
    EXPECT_EQ(legacy->strings_attribute("model_weights/normalization", "weight_names"),
              (std::vector<std::string>{"normalization/mean:0", "normalization/variance:0",
                                        "normalization/count:0"}));
    EXPECT_EQ(legacy->read_int("model_weights/normalization/normalization/count:0"), count);
    for (const fs::path& file : {keras, h5}) {
      KerasModel back = load_keras_model(file.string());
      ASSERT_EQ(back.counters.size(), 1u);
      EXPECT_EQ(back.counters[0].value, count) << file;
    }
  }
  EXPECT_LT(max_relative_error(load_keras_model((out.path / "50.keras").string()).model->predict(x),
                               want),
            1e-5);
}

// A file naming code is refused with the layer and class, never run.
TEST(KerasFiles, CodeIsRefused) {
  const fs::path dir = fs::temp_directory_path() / ("keras_code_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const json lambda = {{"format", "layers-model"},
                       {"modelTopology",
                        {{"class_name", "Sequential"},
                         {"config",
                          {{"name", "s"},
                           {"layers",
                            {{{"class_name", "Lambda"},
                              {"config",
                               {{"name", "evil"},
                                {"function", "4wEAAAA="},
                                {"batch_input_shape", {nullptr, 3}}}}}}}}}}},
                       {"weightsManifest", json::array()}};
  std::ofstream(dir / "model.json") << lambda.dump();
  try {
    load_keras_model((dir / "model.json").string());
    ADD_FAILURE() << "a Lambda layer loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'evil' of class 'Lambda'"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// A TensorFlow.js model.json is recognised by its content, not by ".json":
// a Hugging Face config.json (train --model dir/config.json) is no Keras
// model, nor is a directory holding only one, nor a preset name.
TEST(KerasFiles, FormatByContent) {
  const fs::path dir = fs::temp_directory_path() / ("keras_format_" + std::to_string(::getpid()));
  fs::create_directories(dir / "hf");
  fs::create_directories(dir / "tfjs");
  std::ofstream(dir / "hf" / "config.json") << R"({"model_type": "gpt2", "n_layer": 2})";
  std::ofstream(dir / "list.json") << "[1, 2]";
  std::ofstream(dir / "broken.json") << "{\"modelTop";
  std::ofstream(dir / "tfjs" / "model.json")
      << R"({"format": "layers-model", "modelTopology": {"class_name": "Sequential"}})";
  std::ofstream(dir / "manifest_first.json") << R"({"weightsManifest": [], "x": 1})";
  const std::string hf = (dir / "hf" / "config.json").string();
  EXPECT_EQ(keras_format_of(hf), "");
  EXPECT_FALSE(is_keras_model_path(hf));
  EXPECT_FALSE(is_keras_model_path((dir / "hf").string()));
  EXPECT_FALSE(is_keras_model_path((dir / "list.json").string()));
  EXPECT_FALSE(is_keras_model_path((dir / "broken.json").string()));
  EXPECT_FALSE(is_keras_model_path("tiny"));
  EXPECT_EQ(keras_format_of((dir / "tfjs" / "model.json").string()), "tfjs");
  EXPECT_TRUE(is_keras_model_path((dir / "tfjs" / "model.json").string()));
  EXPECT_TRUE(is_keras_model_path((dir / "tfjs").string()));
  EXPECT_TRUE(is_keras_model_path((dir / "manifest_first.json").string()));
  EXPECT_TRUE(is_keras_model_path(kKerasLayerFixtures + "/tfjs/batch_normalization_dense.json"));
  // Output paths of save: a directory or model.json not yet there.
  EXPECT_EQ(keras_format_of((dir / "out").string()), "tfjs");
  EXPECT_EQ(keras_format_of((dir / "out.keras").string()), "keras");
  EXPECT_EQ(keras_format_of((dir / "out.h5").string()), "h5");
  try {
    load_keras_model(hf);
    ADD_FAILURE() << "a Hugging Face config.json loaded as a Keras model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a Keras file"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

// A scratch directory removed at the end of a test.
// Loads `path`, saves it in each format its own can be written as, loads
// each output again: the predictions on `x` are identical (the very same
// float32 weights), and the compile config reads back the same.
void expect_round_trips(const std::string& path, const ModelInputs& x, const KerasLoadOptions& o) {
  KerasModel k = load_keras_model(path, o);
  const std::vector<Tensor> want = k.model->predict_outputs(x, 64);
  ScratchDir dir("keras_round_trip");
  const std::vector<std::string> outs =
      k.format == "keras" ? std::vector<std::string>{"m.keras"}
                          : std::vector<std::string>{"m.h5", "tfjs_dir", "again/model.json"};
  for (const std::string& name : outs) {
    SCOPED_TRACE(path + " -> " + name);
    const fs::path out = dir.path / name;
    if (out.has_parent_path()) fs::create_directories(out.parent_path());
    save_keras_model(k, out.string());
    KerasModel back = load_keras_model(out.string(), o);
    EXPECT_EQ(back.inputs.size(), k.inputs.size());
    EXPECT_EQ(back.outputs.size(), k.outputs.size());
    EXPECT_EQ(back.compile.present, k.compile.present);
    EXPECT_EQ(back.compile.optimizer, k.compile.optimizer);
    EXPECT_EQ(back.compile.losses, k.compile.losses);
    EXPECT_EQ(back.compile.metrics, k.compile.metrics);
    const std::vector<Tensor> got = back.model->predict_outputs(x, 64);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(max_abs_diff(got[i], want[i]), 0.0);
    // Never replaced.
    EXPECT_THROW(save_keras_model(k, out.string()), Error);
  }
}

// The .keras and .h5 fixtures of tools/keras_files/make_fixtures.py hold
// the same models and weights as TF.js fixtures: their predictions are the
// TF.js ones, on one device and on meshes.
TEST(KerasFiles, KerasAndH5FixturesMatchTensorFlowJs) {
  const std::string dir = std::string(AUTOSHARD_TEST_DATA) + "/keras_files";
  for (const std::string name :
       {"batch_normalization_dense", "two_outputs", "lstm_language_model", "resnet_cnn"}) {
    const json& spec = keras_fixture_spec(name);
    SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
    for (const std::string ext : {".keras", ".h5"}) {
      for (const char* mesh : {"", "model=3", "data=2,model=2"}) {
        SCOPED_TRACE(name + ext + " on '" + mesh + "'");
        KerasModel k = load_keras_model(dir + "/" + name + ext);
        EXPECT_EQ(k.format, ext == ".keras" ? "keras" : "h5");
        EXPECT_EQ(k.compile.optimizer, "Adam");
        EXPECT_EQ(k.compile.metrics, std::vector<std::string>{"mae"});
        if (*mesh)
          k.model->set_distribution(std::make_shared<AutoShard>(
              DeviceMesh::parse(mesh), "data", AutoShardOptions{.time_limit_s = 0.1}));
        const std::vector<Tensor> got =
            k.model->predict_outputs(keras_fixture_inputs(spec, ref), 64);
        ASSERT_EQ(got.size(), spec.at("outputs").size());
        for (size_t i = 0; i < got.size(); ++i) {
          const Tensor want = ref.load("output/" + std::string(spec.at("outputs").at(i)));
          EXPECT_LT(max_relative_error(got[i], want.reshaped(got[i].shape())), 1e-5);
        }
      }
    }
    // And they round trip through every format they can be written as.
    expect_round_trips(dir + "/" + name + ".keras", keras_fixture_inputs(spec, ref), {});
    expect_round_trips(dir + "/" + name + ".h5", keras_fixture_inputs(spec, ref), {});
  }
}

TEST(KerasFiles, TfjsRoundTrips) {
  for (const std::string name : {"resnet_cnn", "siamese", "lstm_language_model", "two_outputs",
                                 "batch_normalization_dense"}) {
    if (uses_custom_layer(name)) continue;
    const json& spec = keras_fixture_spec(name);
    SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
    expect_round_trips(kKerasLayerFixtures + "/tfjs/" + name + ".json",
                       keras_fixture_inputs(spec, ref), {});
  }
}

// Random inputs of a loaded model's input shapes (batch of 3).
ModelInputs random_inputs(const KerasModel& k) {
  std::map<std::string, Tensor> named;
  for (const KerasTensorSpec& in : k.inputs) {
    Shape shape = in.shape;
    shape.insert(shape.begin(), 3);
    Tensor x(shape, in.dtype);
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (x.dtype() == DType::I32)
        x.i32()[i] = static_cast<int32_t>(i % 7);
      else
        x.f32()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
    }
    named[in.name] = x;
  }
  if (named.size() == 1) return named.begin()->second;
  return named;
}

TEST(KerasFiles, RealFilesRoundTrip) {
  if (!fs::exists(kSharedKerasFiles)) GTEST_SKIP() << "no " << kSharedKerasFiles;
  KerasLoadOptions o;
  o.inference = true;
  for (const std::string file : {"fashion_cnn.keras", "bi_lstm.keras", "lenet5.h5"}) {
    const std::string path = kSharedKerasFiles + "/" + file;
    expect_round_trips(path, random_inputs(load_keras_model(path, o)), o);
  }
}

// Weights changed after loading (training) are what is saved; a changed
// compile config is written in the output format's own form.
TEST(KerasFiles, SaveWritesCurrentWeightsAndCompileConfig) {
  const std::string path = kKerasLayerFixtures + "/tfjs/two_outputs.json";
  KerasModel k = load_keras_model(path);
  const std::string w = k.weight_names.front().cpp;
  Tensor changed = k.model->gather_weight(w);
  for (int64_t i = 0; i < changed.numel(); ++i) changed.f32()[i] = 0.25f * static_cast<float>(i);
  k.model->set_weight(w, changed);
  k.compile.present = true;
  k.compile.optimizer = "RMSprop";
  k.compile.optimizer_config = {{"learning_rate", 0.01}, {"rho", 0.8}};
  k.compile.losses = {{{"name", "mean_squared_error"}}, {{"name", "mean_absolute_error"}}};
  k.compile.loss_weights = {1.0, 0.5};
  k.compile.metrics = {"mae"};
  ScratchDir dir("keras_save_current");
  for (const std::string name : {"m.h5", "tfjs", "m.keras"}) {  // .keras: converted
    SCOPED_TRACE(name);
    save_keras_model(k, (dir.path / name).string());
    KerasModel back = load_keras_model((dir.path / name).string());
    EXPECT_EQ(max_abs_diff(back.model->gather_weight(w), changed), 0.0);
    EXPECT_EQ(back.compile.optimizer, "RMSprop");
    EXPECT_EQ(back.compile.optimizer_config, k.compile.optimizer_config);
    EXPECT_EQ(back.compile.losses, k.compile.losses);
    EXPECT_EQ(back.compile.loss_weights, k.compile.loss_weights);
    EXPECT_EQ(back.compile.metrics, k.compile.metrics);
  }
  // An existing directory is never replaced, and nothing is left beside it.
  fs::create_directories(dir.path / "taken");
  EXPECT_THROW(save_keras_model(k, (dir.path / "taken").string()), Error);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()), 4);
}

}  // namespace
}  // namespace autoshard
