// The Keras layer fixtures (tests/data/keras_layers, made by
// tools/keras_fixtures with TensorFlow.js) and the real Keras files of
// ../shared/keras-files, as the tests that read them find them.
#pragma once

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/nn/model.h"
#include "test_util.h"

namespace autoshard::testing {

inline const std::string kKerasLayerFixtures = kTestData + "/keras_layers";
inline const std::string kKerasFileFixtures = kTestData + "/keras_files";
inline const std::string kSharedKerasFiles = kTestData + "/../../../shared/keras-files";

// index.json: one entry per fixture model ("name", "inputs", "loss", ...).
inline const nlohmann::json& keras_fixture_index() {
  static const nlohmann::json index = [] {
    std::ifstream in(kKerasLayerFixtures + "/index.json");
    AS_CHECK(in.good(), "cannot read ", kKerasLayerFixtures,
             "/index.json: run tools/keras_fixtures");
    return nlohmann::json::parse(in);
  }();
  return index;
}

// The index entry of the fixture `name`.
inline const nlohmann::json& keras_fixture_spec(const std::string& name) {
  for (const nlohmann::json& m : keras_fixture_index().at("models"))
    if (m.at("name") == name) return m;
  fail("no fixture model '", name, "' in ", kKerasLayerFixtures, "/index.json");
}

// The fixture's inputs as the loaded model names them (read from its
// reference file's "input/NAME" tensors).
inline ModelInputs keras_fixture_inputs(const nlohmann::json& spec, const SafetensorsFile& ref) {
  std::map<std::string, Tensor> named;
  for (const nlohmann::json& in : spec.at("inputs"))
    named[in.at("name")] = ref.load("input/" + std::string(in.at("name")));
  if (named.size() == 1) return named.begin()->second;
  return named;
}

}  // namespace autoshard::testing
