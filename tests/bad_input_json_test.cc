// Hostile JSON in every door that reads it (issue 54): nesting deep enough
// to overflow the stack is refused while parsing, with the limit named; a
// value of the wrong type is one error naming the field, never a JSON
// library exception; model graphs from files are built in linear time and
// without recursion; normalisations whose numbers make NaN are refused when
// read; and names from files are printed as one line of escaped text.
#include <gtest/gtest.h>
#include <zip.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/checkpoint.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/io/tokenizer.h"
#include "autoshard/json.h"
#include "autoshard/models/config_reader.h"
#include "autoshard/models/keras_hub_model.h"
#include "autoshard/plan/cluster.h"
#include "autoshard/plan/distribution.h"
#include "cli_runner.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// `n` nested lists: [[[...]]].
std::string nested_lists(int n) {
  return std::string(n, '[') + std::string(n, ']');
}

// A deep value well past the limit, as the sweep's files held (100,000 levels).
const std::string kDeep = nested_lists(100000);

// `j` dumped with the string "@DEEP@" replaced by kDeep.
std::string with_deep(const json& j) {
  std::string text = j.dump();
  const size_t at = text.find("\"@DEEP@\"");
  EXPECT_NE(at, std::string::npos);
  return text.replace(at, 8, kDeep);
}

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// The message of the Error `f` throws ("" when it throws none). Any other
// exception (a JSON library's) fails the test.
std::string door_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an autoshard::Error: " << e.what();
    return e.what();
  }
  return "";
}

// ---- Model files made here ----

json input_layer(const std::string& name, const json& shape) {
  json batch = json::array({nullptr});
  for (const json& d : shape) batch.push_back(d);
  return {{"name", name},
          {"class_name", "InputLayer"},
          {"config", {{"batch_input_shape", batch}, {"dtype", "float32"}, {"name", name}}},
          {"inbound_nodes", json::array()}};
}

// A layer of a Keras 2 / TF.js functional model called once on `from`.
json call_layer(const std::string& cls, const std::string& name, json config,
                const std::string& from) {
  config["name"] = name;
  return {{"name", name},
          {"class_name", cls},
          {"config", config},
          {"inbound_nodes", {{{from, 0, 0, json::object()}}}}};
}

json functional_model(const std::vector<json>& layers, const std::string& in,
                      const std::string& out) {
  return {{"class_name", "Model"},
          {"config",
           {{"name", "m"},
            {"layers", layers},
            {"input_layers", {{in, 0, 0}}},
            {"output_layers", {{out, 0, 0}}}}}};
}

// x [5] -> Dense "dense" (3 units), the model the type cases edit.
json dense_model() {
  return functional_model(
      {input_layer("x", {5}), call_layer("Dense", "dense", {{"units", 3}}, "x")}, "x", "dense");
}

struct Weight {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

// A TensorFlow.js model.json (topology `doc`'s modelTopology, and its
// weights in one shard) under `dir`; returns the model.json's path.
std::string write_tfjs(const fs::path& dir, json doc, const std::vector<Weight>& weights = {}) {
  json manifest = json::array();
  std::string bin;
  json list = json::array();
  for (const Weight& w : weights) {
    list.push_back({{"name", w.name}, {"shape", w.shape}, {"dtype", "float32"}});
    bin.append(reinterpret_cast<const char*>(w.values.data()), w.values.size() * sizeof(float));
  }
  doc["weightsManifest"] = {{{"paths", {"w.bin"}}, {"weights", list}}};
  write_text(dir / "w.bin", bin);
  write_text(dir / "model.json", doc.dump());
  return (dir / "model.json").string();
}

std::string write_tfjs_text(const fs::path& dir, const std::string& text) {
  write_text(dir / "model.json", text);
  write_text(dir / "w.bin", "");
  return (dir / "model.json").string();
}

// A .keras zip of the given members (no weights: read with weights=false).
std::string write_keras_zip(const fs::path& path,
                            const std::map<std::string, std::string>& members) {
  fs::create_directories(path.parent_path());
  int code = 0;
  zip_t* z = zip_open(path.c_str(), ZIP_CREATE | ZIP_TRUNCATE, &code);
  EXPECT_NE(z, nullptr);
  for (const auto& [name, text] : members) {
    zip_source_t* src = zip_source_buffer(z, text.data(), text.size(), 0);
    EXPECT_GE(zip_file_add(z, name.c_str(), src, ZIP_FL_ENC_UTF_8), 0);
  }
  EXPECT_EQ(zip_close(z), 0);
  return path.string();
}

// A Keras 3 config.json of x [5] -> Dense.
json keras3_dense() {
  return {{"module", "keras"},
          {"class_name", "Functional"},
          {"config",
           {{"name", "m"},
            {"layers",
             {{{"module", "keras.layers"},
               {"class_name", "InputLayer"},
               {"config", {{"batch_shape", {nullptr, 5}}, {"dtype", "float32"}, {"name", "x"}}},
               {"name", "x"},
               {"inbound_nodes", json::array()}},
              {{"module", "keras.layers"},
               {"class_name", "Dense"},
               {"config", {{"units", 3}, {"name", "dense"}}},
               {"name", "dense"},
               {"inbound_nodes",
                {{{"args",
                   {{{"class_name", "__keras_tensor__"},
                     {"config", {{"shape", {nullptr, 5}}, {"keras_history", {"x", 0, 0}}}}}}},
                  {"kwargs", json::object()}}}}}}},
            {"input_layers", {{"x", 0, 0}}},
            {"output_layers", {{"dense", 0, 0}}}}},
          {"registered_name", "Functional"}};
}

KerasLoadOptions no_weights() {
  KerasLoadOptions o;
  o.weights = false;
  return o;
}

class BadInputJson : public testing::TempDirTest {};

// ---- K04: one nesting limit for every JSON door ----

struct DeepDoor {
  const char* name;
  std::function<void(const fs::path& dir)> read;
};

TEST_F(BadInputJson, EveryJsonDoorRefusesDeepNestingNamingTheLimit) {
  const json deep_field = {{"class_name", "X"}, {"config", {{"deep", "@DEEP@"}}}};
  const std::vector<DeepDoor> doors = {
      {"TF.js model.json (an initializer)",
       [&](const fs::path& d) {
         json m = dense_model();
         m["config"]["layers"][1]["config"]["kernel_initializer"] = deep_field;
         load_keras_model(write_tfjs_text(d, with_deep({{"modelTopology", m}})), no_weights());
       }},
      {".keras config.json (call args)",
       [&](const fs::path& d) {
         json c = keras3_dense();
         c["config"]["layers"][1]["inbound_nodes"][0]["args"] = "@DEEP@";
         load_keras_model(write_keras_zip(d / "m.keras", {{"config.json", with_deep(c)}}),
                          no_weights());
       }},
      {".keras compile config",
       [&](const fs::path& d) {
         json c = keras3_dense();
         c["compile_config"] = {{"loss", "@DEEP@"}};
         load_keras_model(write_keras_zip(d / "m.keras", {{"config.json", with_deep(c)}}),
                          no_weights());
       }},
      {".keras metadata.json",
       [&](const fs::path& d) {
         load_keras_model(
             write_keras_zip(d / "m.keras", {{"config.json", keras3_dense().dump()},
                                             {"metadata.json", with_deep({{"x", "@DEEP@"}})}}),
             no_weights());
       }},
      {"KerasHub config.json",
       [&](const fs::path& d) {
         write_text(d / "config.json", with_deep({{"module", "keras_hub"},
                                                  {"class_name", "GPT2Backbone"},
                                                  {"config", {{"deep", "@DEEP@"}}}}));
         keras_hub::preset_config(d.string());
       }},
      {"KerasHub tokenizer.json",
       [&](const fs::path& d) {
         write_text(d / "tokenizer.json",
                    with_deep({{"class_name", "GPT2Tokenizer"}, {"config", "@DEEP@"}}));
         fs::create_directories(d / "assets" / "tokenizer");
         keras_hub::load_preset_tokenizer(d.string());
       }},
      {"Hugging Face tokenizer.json",
       [&](const fs::path& d) {
         write_text(d / "tokenizer.json", with_deep({{"model", "@DEEP@"}}));
         load_tokenizer(d.string());
       }},
      {"Hugging Face config.json",
       [&](const fs::path&) {
         ConfigReader(with_deep({{"n_layer", "@DEEP@"}}), "config.json");
       }},
      {"cluster file",
       [&](const fs::path&) {
         Cluster::from_json(with_deep({{"device", "@DEEP@"}}), "c.json");
       }},
      {"layout map",
       [&](const fs::path&) {
         LayoutMap::from_json_text(with_deep({{"a", "@DEEP@"}}), "l.json");
       }},
      {"checkpoint state",
       [&](const fs::path&) {
         parse_state(with_deep({{"format", "@DEEP@"}}), "state.json");
       }},
      {"safetensors header",
       [&](const fs::path& d) {
         const std::string header = with_deep({{"__metadata__", "@DEEP@"}});
         std::string file(8, '\0');
         for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 255);
         write_text(d / "m.safetensors", file + header);
         SafetensorsFile f((d / "m.safetensors").string());
       }},
  };
  for (const DeepDoor& door : doors) {
    const fs::path d = dir_ / std::to_string(&door - doors.data());
    fs::create_directories(d);
    const std::string e = door_error([&] { door.read(d); });
    EXPECT_NE(e.find("deeper than 512 levels"), std::string::npos) << door.name << ": " << e;
  }
}

TEST_F(BadInputJson, ReportRefusesDeepAndOverflowingLines) {
  const struct {
    const char* line;
    const char* expected;
  } cases[] = {
      {"{\"step\": 1, \"loss\": 1e999}", "line 1 is not valid JSON: a number is out of range"},
      {"{\"step\": 1, \"loss\": @}", "line 1 is not valid JSON"}};
  for (const auto& c : cases) {
    std::string line = c.line;
    write_text(dir_ / "log.jsonl", line + "\n");
    const auto r = cli_runner::run("report " + (dir_ / "log.jsonl").string() + " --html " +
                                   (dir_ / "r.html").string());
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    EXPECT_EQ(cli_runner::count(r.output, "\n"), 1) << r.output;
    EXPECT_EQ(r.output.find("1e999"), std::string::npos) << "the file's text in: " << r.output;
  }
  write_text(dir_ / "log.jsonl", "{\"step\": 1, \"x\": " + kDeep + "}\n");
  const auto r = cli_runner::run("report " + (dir_ / "log.jsonl").string() + " --html " +
                                 (dir_ / "r.html").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("deeper than 512 levels"), std::string::npos) << r.output;
}

// ---- K02: a value of the wrong type is one error naming the field ----

struct TypeCase {
  const char* name;
  std::function<void(json& topology)> edit;
  const char* expected;  // in the message
};

TEST_F(BadInputJson, WrongTypesNameTheFieldNotTheJsonLibrary) {
  auto dense = [](json& m) -> json& { return m["config"]["layers"][1]["config"]; };
  auto bidirectional = [](json& m) {
    m["config"]["layers"][0] = input_layer("x", {4, 3});
    json lstm = {{"class_name", "LSTM"}, {"config", {{"units", 2}, {"name", "lstm"}}}};
    m["config"]["layers"][1] = call_layer("Bidirectional", "dense", {{"layer", lstm}}, "x");
  };
  const std::vector<TypeCase> cases = {
      {"model name", [](json& m) { m["config"]["name"] = 5; }, "'name' must be a string"},
      {"input sparse", [](json& m) { m["config"]["layers"][0]["config"]["sparse"] = "yes"; },
       "'sparse' must be true or false"},
      {"DTypePolicy name",
       [&](json& m) {
         dense(m)["dtype"] = {{"class_name", "DTypePolicy"}, {"config", {{"name", 5}}}};
       },
       "'name' must be a string"},
      {"activation class_name",
       [&](json& m) {
         dense(m)["activation"] = {{"class_name", 5}, {"config", "relu"}};
       },
       "is not a built-in activation"},
      {"activation module",
       [&](json& m) {
         dense(m)["activation"] = {{"class_name", "function"}, {"config", "relu"}, {"module", 7}};
       },
       "is not a built-in activation"},
      {"__keras_tensor__ class_name",
       [](json& m) {
         m["config"]["layers"][1]["inbound_nodes"] = {
             {{"args", {{{"class_name", 5}, {"config", {{"keras_history", {"x", 0, 0}}}}}}}}};
       },
       "is not a tensor"},
      {"__tuple__ config",
       [](json& m) {
         m["config"]["layers"][1]["inbound_nodes"] = {
             {{"args", {{{"class_name", "__tuple__"}, {"config", "x"}}}}}};
       },
       "a __tuple__'s config must be an object"},
      {"keras_history node 2^32",
       [](json& m) {
         m["config"]["layers"][1]["inbound_nodes"] = {{{"x", 4294967296LL, 0, json::object()}}};
       },
       "is out of range"},
      {"Bidirectional inner class_name",
       [&](json& m) {
         bidirectional(m);
         dense(m)["layer"]["class_name"] = 5;
       },
       "'class_name' must be a string"},
      {"Bidirectional inner config",
       [&](json& m) {
         bidirectional(m);
         dense(m)["layer"]["config"] = 5;
       },
       "config that is not an object"},
      {"Bidirectional inner name",
       [&](json& m) {
         bidirectional(m);
         dense(m)["layer"]["config"]["name"] = 5;
       },
       "'name' must be a string"},
      {"Bidirectional backward class_name",
       [&](json& m) {
         bidirectional(m);
         dense(m)["backward_layer"] = dense(m)["layer"];
         dense(m)["backward_layer"]["class_name"] = 5;
       },
       "'class_name' must be a string"},
      {"Bidirectional backward go_backwards",
       [&](json& m) {
         bidirectional(m);
         dense(m)["backward_layer"] = dense(m)["layer"];
         dense(m)["backward_layer"]["config"]["go_backwards"] = "yes";
       },
       "'go_backwards' must be true or false"},
      {"modelTopology keras_version", [](json& m) { m["keras_version"] = 5; },
       "'keras_version' must be a string"},
  };
  for (const TypeCase& c : cases) {
    json m = dense_model();
    c.edit(m);
    const fs::path d = dir_ / std::to_string(&c - cases.data());
    const std::string e = door_error([&] {
      load_keras_model(write_tfjs(d, {{"modelTopology", m}}), no_weights());
    });
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.name << ": " << e;
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << c.name << ": " << e;
  }
}

TEST_F(BadInputJson, WrongTypesOutsideTheArchitecture) {
  struct Case {
    std::string name;
    std::function<std::string(const fs::path&)> write;
    const char* expected;
    bool weights = false;
  };
  const std::vector<Case> cases = {
      {"trainingConfig optimizer class_name",
       [](const fs::path& d) {
         return write_tfjs(
             d, {{"modelTopology", dense_model()},
                 {"trainingConfig",
                  {{"loss", "mean_squared_error"},
                   {"optimizer_config", {{"class_name", 5}, {"config", json::object()}}}}}});
       },
       "'class_name' must be a string"},
      {"loss from_logits",
       [](const fs::path& d) {
         return write_tfjs(
             d,
             {{"modelTopology", dense_model()},
              {"trainingConfig",
               {{"loss",
                 {{"class_name", "BinaryCrossentropy"}, {"config", {{"from_logits", "yes"}}}}}}}});
       },
       "'from_logits' must be true or false"},
      {"weightsManifest dtype",
       [](const fs::path& d) {
         const std::string path = write_tfjs(d, {{"modelTopology", dense_model()}},
                                             {{"dense/kernel", {5, 3}, std::vector<float>(15)},
                                              {"dense/bias", {3}, std::vector<float>(3)}});
         json doc = json::parse(std::ifstream(path));
         doc["weightsManifest"][0]["weights"][0]["dtype"] = 5;
         write_text(path, doc.dump());
         return path;
       },
       "'dtype' must be a string", true},
      {"metadata.json keras_version",
       [](const fs::path& d) {
         return write_keras_zip(d / "m.keras", {{"config.json", keras3_dense().dump()},
                                                {"metadata.json", R"({"keras_version": 3})"}});
       },
       "'keras_version' must be a string"},
  };
  for (const Case& c : cases) {
    const fs::path d = dir_ / std::to_string(&c - cases.data());
    KerasLoadOptions o = no_weights();
    o.weights = c.weights;
    const std::string e = door_error([&] { load_keras_model(c.write(d), o); });
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.name << ": " << e;
    EXPECT_EQ(e.find("json.exception"), std::string::npos) << c.name << ": " << e;
  }
}

// The backstop: a JSON exception escaping any read becomes one Error naming
// the file, without the library's id.
TEST(BadInputJsonBackstop, JsonExceptionsBecomeOneErrorNamingTheFile) {
  const std::string e = door_error(
      [] { with_json_errors("Keras model 'm.keras'", [] { return json(5).get<std::string>(); }); });
  EXPECT_EQ(e,
            "Keras model 'm.keras': a value has the wrong type or is out of range (type must "
            "be string, but is number)");
}

// ---- K12, K13, K05, K03: graphs from files, in linear time ----

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// x [5] -> n ReLUs, as a Sequential.
json relu_chain(int n) {
  json layers = json::array({input_layer("x", {5})});
  for (int i = 0; i < n; ++i)
    layers.push_back({{"class_name", "ReLU"}, {"config", {{"name", "r" + std::to_string(i)}}}});
  return {{"class_name", "Sequential"}, {"config", {{"name", "chain"}, {"layers", layers}}}};
}

TEST_F(BadInputJson, A50kLayerSequentialLoadsAndRunsWithoutRecursion) {
  const auto start = std::chrono::steady_clock::now();
  {
    KerasModel k =
        load_keras_model(write_tfjs(dir_, {{"modelTopology", relu_chain(50000)}}), no_weights());
    Tensor x({2, 5});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i) - 4.5f;
    const Tensor y = k.model->predict(ModelInputs(x), 2);
    for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.f32()[i], std::max(0.0f, x.f32()[i])) << i;
  }  // and freed without recursion
  EXPECT_LT(seconds_since(start), 60.0 * cli_runner::kTimeLimitScale);
}

TEST_F(BadInputJson, AReversedFunctionalChainBuildsInLinearTime) {
  // x -> d0 -> d1 -> ... listed last layer first: each is ready only after
  // every layer listed behind it (Keras 2 configs need not be sorted).
  const int n = 30000;
  std::vector<json> layers;
  for (int i = n - 1; i >= 0; --i)
    layers.push_back(call_layer("ReLU", "r" + std::to_string(i), json::object(),
                                i == 0 ? "x" : "r" + std::to_string(i - 1)));
  layers.push_back(input_layer("x", {5}));
  const auto start = std::chrono::steady_clock::now();
  KerasModel k = load_keras_model(
      write_tfjs(dir_,
                 {{"modelTopology", functional_model(layers, "x", "r" + std::to_string(n - 1))}}),
      no_weights());
  EXPECT_LT(seconds_since(start), 20.0 * cli_runner::kTimeLimitScale);
}

// A TF.js model.json of `depth` Sequentials nested in one another around one
// ReLU (Keras 2's form: the innermost layer carries the input's shape),
// written as text: building it as a JSON value copies it once per level.
std::string nested_sequentials(int depth) {
  std::string open, close;
  for (int i = 0; i < depth; ++i) {
    open += R"({"class_name": "Sequential", "config": {"name": "s)" + std::to_string(i) +
            R"(", "layers": [)";
    close += "]}}";
  }
  return R"({"modelTopology": )" + open +
         R"({"class_name": "ReLU", "config": {"name": "relu", "batch_input_shape": [null, 5]}})" +
         close + R"(, "weightsManifest": []})";
}

TEST_F(BadInputJson, NestedModelsLoadToTheLimitAndNoDeeper) {
  const std::string ok = write_tfjs_text(dir_ / "ok", nested_sequentials(100));
  const auto start = std::chrono::steady_clock::now();
  KerasModel k = load_keras_model(ok, no_weights());
  EXPECT_LT(seconds_since(start), 10.0 * cli_runner::kTimeLimitScale);
  const struct {
    int depth;
    const char* expected;
  } cases[] = {{150, "models are nested more than 128 deep"},
               {2000, "deeper than 512 levels"},
               {5000, "deeper than 512 levels"}};
  for (const auto& c : cases) {
    const std::string path =
        write_tfjs_text(dir_ / std::to_string(c.depth), nested_sequentials(c.depth));
    const auto t = std::chrono::steady_clock::now();
    const std::string e = door_error([&] { load_keras_model(path, no_weights()); });
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.depth << ": " << e;
    EXPECT_LT(seconds_since(t), 10.0 * cli_runner::kTimeLimitScale) << c.depth;
  }
}

// ---- K06: numbers that make every prediction NaN ----

TEST_F(BadInputJson, NormalisationsThatMakeNaNAreRefusedWhenRead) {
  auto norm = [](const std::string& cls, json config) {
    return functional_model(
        {input_layer("x", {3}), call_layer(cls, "norm", std::move(config), "x")}, "x", "norm");
  };
  const std::vector<float> ones(3, 1.0f), zeros(3, 0.0f);
  const struct {
    const char* name;
    json model;
    std::vector<Weight> weights;
    const char* expected;
  } cases[] = {
      {"negative moving_variance",
       norm("BatchNormalization", {{"epsilon", 1e-3}}),
       {{"norm/gamma", {3}, ones},
        {"norm/beta", {3}, zeros},
        {"norm/moving_mean", {3}, zeros},
        {"norm/moving_variance", {3}, {1.0f, -0.5f, 1.0f}}},
       "'moving_variance' holds -0.5 at index 1"},
      {"BatchNormalization epsilon -1",
       norm("BatchNormalization", {{"epsilon", -1}}),
       {},
       "field 'epsilon' = -1 must be above 0"},
      {"LayerNormalization epsilon -1",
       norm("LayerNormalization", {{"epsilon", -1}}),
       {},
       "field 'epsilon' = -1 must be above 0"},
      {"GroupNormalization epsilon 0",
       norm("GroupNormalization", {{"epsilon", 0}, {"groups", 1}}),
       {},
       "field 'epsilon' = 0 must be above 0"},
  };
  for (const auto& c : cases) {
    const fs::path d = dir_ / std::to_string(&c - cases);
    KerasLoadOptions o;
    o.weights = !c.weights.empty();
    const std::string e = door_error([&] {
      load_keras_model(write_tfjs(d, {{"modelTopology", c.model}}, c.weights), o);
    });
    EXPECT_NE(e.find(c.expected), std::string::npos) << c.name << ": " << e;
    EXPECT_NE(e.find("layer 'norm'"), std::string::npos) << c.name << ": " << e;
  }
}

// ---- M01, L01: names from files are printed as one line ----

TEST(BadInputJsonMessages, ControlCharactersAreEscapedAndLongMessagesCut) {
  const struct {
    std::string in, out;
  } cases[] = {
      {"plain text", "plain text"},
      {"a\nautoshard: note: forged", "a\\nautoshard: note: forged"},
      {"\x1b[31mred\r\t", "\\x1b[31mred\\r\\t"},
      {std::string("nul\0byte", 8), "nul\\x00byte"},
      {"del\x7f", "del\\x7f"},
      {"caf\xc3\xa9 \xe6\x97\xa5", "caf\xc3\xa9 \xe6\x97\xa5"},               // UTF-8 kept
      {"bad \xff\xc3", "bad \\xff\\xc3"},                                     // not UTF-8
      {"c1 \xc2\x85 rtl \xe2\x80\xae", "c1 \\xc2\\x85 rtl \\xe2\\x80\\xae"},  // NEL, RLO
  };
  for (const auto& c : cases) EXPECT_EQ(Error(c.in).what(), c.out);
  const std::string long_message = "start " + std::string(100000, 'x') + " end";
  const std::string cut = Error(long_message).what();
  EXPECT_LE(cut.size(), kMaxMessageBytes + 100);
  EXPECT_EQ(cut.rfind("start ", 0), 0u);
  EXPECT_TRUE(cut.ends_with(" end"));
  EXPECT_EQ(shown_name(std::string(300, 'n')), std::string(200, 'n') + "...");
}

TEST_F(BadInputJson, ALayerNamedWithControlCharactersIsPrintedOnOneLine) {
  json m = dense_model();
  const std::string name = "evil\nautoshard: note: all good\x1b[32m";
  m["config"]["layers"][1] =
      call_layer("NoSuchLayer", name, json::object(), "x");  // refused, naming the layer
  m["config"]["output_layers"] = {{name, 0, 0}};
  const std::string path = write_tfjs(dir_, {{"modelTopology", m}});
  const auto r = cli_runner::run("plan --model " + path + " --batch 4");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(cli_runner::count(r.output, "\n"), 1) << r.output;
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("evil\\nautoshard: note: all good\\x1b[32m"), std::string::npos)
      << r.output;
}

TEST_F(BadInputJson, ALongLayerNameIsCutInMessages) {
  json m = dense_model();
  const std::string name(5000, 'n');
  m["config"]["layers"][1] = call_layer("NoSuchLayer", name, json::object(), "x");
  m["config"]["output_layers"] = {{name, 0, 0}};
  const std::string e = door_error([&] {
    load_keras_model(write_tfjs(dir_, {{"modelTopology", m}}), no_weights());
  });
  EXPECT_NE(e.find("layer '" + std::string(200, 'n') + "...'"), std::string::npos) << e;
  EXPECT_EQ(e.find(std::string(201, 'n')), std::string::npos) << e;
}

TEST_F(BadInputJson, ALayoutMapOfANameWithANulByteIsValidPython) {
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3";
  json m = dense_model();
  const std::string name = std::string("de\0n\nse", 7);
  m["config"]["layers"][1]["name"] = name;
  m["config"]["layers"][1]["config"]["name"] = name;
  m["config"]["output_layers"] = {{name, 0, 0}};
  const std::string path = write_tfjs(dir_, {{"modelTopology", m}});
  const fs::path py = dir_ / "map.py";
  const auto r = cli_runner::run("plan --model " + path + " --batch 4 --mesh model=2 " +
                                 "--export-layout-map " + py.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string cmd =
      "/usr/bin/python3 -c 'import sys; src = open(sys.argv[1], \"rb\").read(); "
      "compile(src, sys.argv[1], \"exec\"); print(\"ok\")' " +
      py.string() + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_EQ(out, "ok\n");
}

}  // namespace
}  // namespace autoshard
