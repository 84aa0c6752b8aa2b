// Converting between Keras 3's `.keras` and Keras 2's forms (`.h5`, a
// TensorFlow.js directory): every fixture saved in each other format and
// loaded again predicts exactly what it did (the same float32 weights), and
// what TensorFlow.js recorded; the architecture is in the output format's
// own form (Keras 3's config objects and __keras_tensor__ nodes, or Keras
// 2's lists and batch_input_shape).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/plan/distribution.h"
#include "cli_runner.h"
#include "io/zip_archive.h"
#include "keras_fixtures.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kKerasFileFixtures;

using testing::keras_fixture_index;
using testing::keras_fixture_inputs;
using testing::keras_fixture_spec;
using testing::kKerasLayerFixtures;

using testing::ScratchDir;

namespace fs = std::filesystem;
using nlohmann::json;

// Every output is `want`, bit for bit.
void expect_same(const std::vector<Tensor>& got, const std::vector<Tensor>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(max_abs_diff(got[i], want[i]), 0.0);
}

// The outputs a model of `format` is converted to.
std::vector<std::string> other_formats(const std::string& format) {
  if (format == "keras") return {"m.h5", "m_tfjs"};
  if (format == "h5") return {"m.keras", "m_tfjs"};
  return {"m.keras", "m.h5"};
}

// Converts `path` to each other format, then each output to a third: every
// model loaded back predicts exactly what the original did.
void expect_conversions(const std::string& path, const ModelInputs& x) {
  KerasModel k = load_keras_model(path);
  const std::vector<Tensor> want = k.model->predict_outputs(x, 64);
  ScratchDir dir("keras_convert");
  for (const std::string& name : other_formats(k.format)) {
    SCOPED_TRACE(path + " -> " + name);
    const std::string out = (dir.path / name).string();
    save_keras_model(k, out);
    KerasModel back = load_keras_model(out);
    EXPECT_EQ(back.format, keras_format_of(out));
    EXPECT_EQ(back.inputs.size(), k.inputs.size());
    EXPECT_EQ(back.compile.losses, k.compile.losses);
    EXPECT_EQ(back.compile.optimizer, k.compile.optimizer);
    expect_same(back.model->predict_outputs(x, 64), want);
    for (const std::string& again : other_formats(back.format)) {
      if (keras_format_of((dir.path / again).string()) == k.format) continue;
      const std::string out2 =
          (dir.path / ("then_" + fs::path(name).stem().string() + "_" + again)).string();
      SCOPED_TRACE("then -> " + out2);
      save_keras_model(back, out2);
      expect_same(load_keras_model(out2).model->predict_outputs(x, 64), want);
    }
  }
}

// The .keras and .h5 fixtures (tools/keras_files/make_fixtures.py).
TEST(KerasConvert, KerasAndH5FixturesConvert) {
  for (const std::string name :
       {"batch_normalization_dense", "two_outputs", "lstm_language_model", "resnet_cnn"}) {
    const json& spec = keras_fixture_spec(name);
    SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
    for (const std::string ext : {".keras", ".h5"})
      expect_conversions(kKerasFileFixtures + "/" + name + ext, keras_fixture_inputs(spec, ref));
  }
}

// Every TF.js fixture autoshard reads, converted to .keras and .h5.
TEST(KerasConvert, TfjsFixturesConvert) {
  int converted = 0;
  for (const json& spec : keras_fixture_index().at("models")) {
    const std::string name = spec.at("name");
    const std::string path = kKerasLayerFixtures + "/tfjs/" + name + ".json";
    try {
      load_keras_model(path, {.weights = false});
    } catch (const Error&) {
      continue;  // a custom TF.js layer (keras_files_test checks the refusal)
    }
    SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
    expect_conversions(path, keras_fixture_inputs(spec, ref));
    ++converted;
  }
  EXPECT_GT(converted, 50);
}

// A .h5 converted to .keras: Keras 3's form throughout; and back to .h5:
// Keras 2's. A converted model also runs on meshes.
TEST(KerasConvert, ArchitectureInEachFormsOwnTerms) {
  ScratchDir dir("keras_convert_form");
  KerasModel k = load_keras_model(kKerasFileFixtures + "/two_outputs.h5");
  save_keras_model(k, (dir.path / "m.keras").string());
  ZipArchive zip((dir.path / "m.keras").string());
  const json config = json::parse(zip.read_text("config.json", 1 << 20));
  EXPECT_EQ(config.at("module"), "keras");
  EXPECT_EQ(config.at("class_name"), "Functional");
  bool input_seen = false, node_seen = false;
  for (const json& l : config.at("config").at("layers")) {
    EXPECT_EQ(l.at("module"), "keras.layers");
    EXPECT_TRUE(l.contains("registered_name"));
    const json& c = l.at("config");
    EXPECT_FALSE(c.contains("batch_input_shape"));
    if (l.at("class_name") == "InputLayer") {
      input_seen = c.contains("batch_shape");
      continue;
    }
    EXPECT_EQ(c.at("dtype").at("class_name"), "DTypePolicy");
    for (const json& node : l.at("inbound_nodes")) {
      ASSERT_TRUE(node.is_object());
      node_seen = true;
      EXPECT_TRUE(node.contains("kwargs"));
    }
    if (c.contains("kernel_initializer")) {
      EXPECT_EQ(c.at("kernel_initializer").at("module"), "keras.initializers");
    }
  }
  EXPECT_TRUE(input_seen);
  EXPECT_TRUE(node_seen);

  KerasModel k3 = load_keras_model((dir.path / "m.keras").string());
  save_keras_model(k3, (dir.path / "back.h5").string());
  KerasModel k2 = load_keras_model((dir.path / "back.h5").string());
  for (const json& l : k2.architecture.at("config").at("layers")) {
    EXPECT_FALSE(l.contains("module"));
    const json& c = l.at("config");
    if (l.at("class_name") == "InputLayer") {
      EXPECT_TRUE(c.contains("batch_input_shape"));
      continue;
    }
    EXPECT_TRUE(c.at("dtype").is_string());
    for (const json& node : l.at("inbound_nodes")) EXPECT_TRUE(node.is_array());
  }
  const json& spec = keras_fixture_spec("two_outputs");
  SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
  const std::vector<Tensor> want = k.model->predict_outputs(keras_fixture_inputs(spec, ref), 64);
  for (const char* mesh : {"model=3", "data=2,model=2"}) {
    KerasModel sharded = load_keras_model((dir.path / "m.keras").string());
    sharded.model->set_distribution(std::make_shared<AutoShard>(
        DeviceMesh::parse(mesh), "data", AutoShardOptions{.time_limit_s = 0.1}));
    const std::vector<Tensor> got =
        sharded.model->predict_outputs(keras_fixture_inputs(spec, ref), 64);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(max_relative_error(got[i], want[i]), 1e-5);
  }
}

// `autoshard convert IN OUT` with a Keras IN writes OUT's Keras format;
// options of the weight conversions and an OUT of no Keras format are
// one-line errors; OUT is never replaced.
TEST(KerasConvert, CommandLine) {
  ScratchDir dir("keras_convert_cli");
  const std::string in = kKerasFileFixtures + "/resnet_cnn.keras", d = dir.path.string();
  for (const std::string out : {"/m.h5", "/m_tfjs", "/again.keras"}) {
    const std::string from = out == "/again.keras" ? d + "/m_tfjs" : in;
    const auto r = cli_runner::run("convert " + from + " " + d + out);
    EXPECT_EQ(r.code, 0) << r.output;
  }
  const json& spec = keras_fixture_spec("resnet_cnn");
  SafetensorsFile ref(kKerasLayerFixtures + "/" + std::string(spec.at("file")));
  const std::vector<Tensor> want =
      load_keras_model(in).model->predict_outputs(keras_fixture_inputs(spec, ref), 64);
  for (const char* out : {"/m.h5", "/m_tfjs", "/again.keras"})
    expect_same(
        load_keras_model(d + out).model->predict_outputs(keras_fixture_inputs(spec, ref), 64),
        want);
  for (const auto& [args, says] : std::vector<std::pair<std::string, std::string>>{
           {in + " " + d + "/m.h5", "already exists"},
           {in + " " + d + "/w.safetensors", "names no Keras format"},
           {in + " " + d + "/x.h5 --dtype bf16", "do not apply"}}) {
    const auto r = cli_runner::run("convert " + args);
    EXPECT_EQ(r.code, 1) << args;
    EXPECT_EQ(cli_runner::count(r.output, "autoshard: error: "), 1) << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace autoshard
