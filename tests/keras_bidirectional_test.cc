// Keras 3 writes every Bidirectional layer with its `backward_layer` (the
// forward layer's mirror): such files load and predict as TF.js recorded,
// on one device and on meshes; a backward layer configured differently is
// an error naming the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/plan/distribution.h"
#include "io/zip_archive.h"
#include "keras_fixtures.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kKerasLayerFixtures;

using testing::ScratchDir;

namespace fs = std::filesystem;
using nlohmann::json;

// `in` (a .keras) with its config.json edited by `edit`, written to `out`.
void edit_keras(const fs::path& in, const fs::path& out, const std::function<void(json&)>& edit) {
  ZipArchive zip(in.string());
  const fs::path parts = out.string() + ".parts";
  fs::create_directories(parts);
  std::vector<std::pair<std::string, std::string>> members;
  for (const std::string& name : zip.names()) {
    std::string text = zip.read_text(name, 64 << 20);
    if (name == "config.json") {
      json config = json::parse(text);
      edit(config);
      text = config.dump();
    }
    std::ofstream((parts / name).string(), std::ios::binary) << text;
    members.emplace_back(name, (parts / name).string());
  }
  write_stored_zip(out.string(), members);
}

// The Bidirectional layer entry of a Keras 3 config.
json& bidirectional(json& config) {
  for (json& l : config.at("config").at("layers"))
    if (l.at("class_name") == "Bidirectional") return l;
  fail("no Bidirectional layer");
}

// Adds the backward layer Keras 3 writes: the forward one mirrored.
void add_mirror(json& config) {
  json& c = bidirectional(config).at("config");
  json backward = c.at("layer");
  json& bc = backward.at("config");
  bc["go_backwards"] = !bc.value("go_backwards", false);
  bc["name"] = "backward_" + bc.value("name", std::string("lstm"));
  c["backward_layer"] = backward;
}

TEST(KerasBidirectional, KerasThreeBackwardLayerLoads) {
  ScratchDir dir("keras_bidi");
  for (const std::string name : {"bidirectional_concat", "bidirectional_gru_last"}) {
    SCOPED_TRACE(name);
    KerasModel tfjs = load_keras_model(kKerasLayerFixtures + "/tfjs/" + name + ".json");
    const fs::path plain = dir.path / (name + ".keras"), mirrored = dir.path / (name + "_b.keras");
    save_keras_model(tfjs, plain.string());
    edit_keras(plain, mirrored, add_mirror);
    SafetensorsFile ref(kKerasLayerFixtures + "/" + name + ".safetensors");
    const Tensor x = ref.load("input/x");
    const std::vector<Tensor> want = tfjs.model->predict_outputs(x, 64);
    for (const char* mesh : {"", "model=3", "data=2,model=2"}) {
      SCOPED_TRACE(mesh);
      KerasModel k = load_keras_model(mirrored.string());
      if (*mesh)
        k.model->set_distribution(std::make_shared<AutoShard>(
            DeviceMesh::parse(mesh), "data", AutoShardOptions{.time_limit_s = 0.1}));
      const std::vector<Tensor> got = k.model->predict_outputs(x, 64);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_LT(max_relative_error(got[0], want[0]), 1e-5);
    }
  }
}

// A backward layer may differ in its options (units, class: loaded with
// its own weights, python/tests/test_recurrent_state.py), but not in what
// Keras's _verify_layer_config requires.
TEST(KerasBidirectional, BackwardLayersKerasRefusesAreRefused) {
  ScratchDir dir("keras_bidi_other");
  KerasModel tfjs = load_keras_model(kKerasLayerFixtures + "/tfjs/bidirectional_concat.json");
  const fs::path plain = dir.path / "plain.keras";
  save_keras_model(tfjs, plain.string());
  const std::vector<std::pair<std::function<void(json&)>, std::string>> cases = {
      {[](json& b) { b.at("config")["return_sequences"] = false; }, "'return_sequences'"},
      {[](json& b) { b.at("config")["go_backwards"] = false; }, "'go_backwards'"},
      {[](json& b) { b["class_name"] = "Dense"; }, "LSTM, GRU or SimpleRNN"}};
  int i = 0;
  for (const auto& [change, field] : cases) {
    const fs::path out = dir.path / ("case" + std::to_string(i++) + ".keras");
    edit_keras(plain, out, [&](json& config) {
      add_mirror(config);
      change(bidirectional(config).at("config").at("backward_layer"));
    });
    try {
      load_keras_model(out.string());
      ADD_FAILURE() << field << " was accepted";
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("backward_layer"), std::string::npos) << what;
      EXPECT_NE(what.find(field), std::string::npos) << what;
      EXPECT_NE(what.find("'bidi"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace autoshard
