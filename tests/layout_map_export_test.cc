// Plans exported as Keras LayoutMaps (plan/layout_map_export.h, `autoshard
// plan --export-layout-map`): the map read back through autoshard's own
// LayoutMap (Keras's lookup) gives the plan's layouts and trains equal to one
// device; every variable is matched by exactly one key, or the export fails
// naming it; KerasHub-style 3-D kernels take a flattened split on the right
// dimension; the .py form defines a get_layout_map that Python's re reads
// the same way; and `plan --divisible` on Gemma 2B's shapes splits only
// where the axis divides.
#include "plan/layout_map_export.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/io/keras_variables.h"
#include "autoshard/models/language_model.h"
#include "autoshard/nn/losses.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "cli_runner.h"
#include "keras_fixtures.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::kKerasFileFixtures;

namespace fs = std::filesystem;
using nlohmann::json;
using testing::TempDirTest;

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The weights' global shapes of a model, by path (a trace of its forward pass).
std::map<std::string, Shape> weight_shapes(Model& model) {
  Graph g;
  model.trace_forward(g, 2, false);
  std::map<std::string, Shape> shapes;
  for (int id : g.parameters()) shapes[g.node(id).leaf().name] = g.node(id).shape;
  return shapes;
}

// The LSTM language model with splits on both sides of uneven and even
// dimensions over model=3 (a layout map over autoshard's weight paths).
LayoutMap forced_layouts() {
  LayoutMap m;
  m["embedding\\.embeddings"] = {std::nullopt, "model"};
  m["lstm_1\\.recurrent_kernel"] = {std::nullopt, "model"};
  m["lstm_2\\.kernel"] = {"model", std::nullopt};
  m["logits\\.kernel"] = {std::nullopt, "model"};
  m["logits\\.bias"] = {"model"};
  return m;
}

LayoutMapExport export_of(const std::string& file, const Distribution& plan) {
  KerasModel k = load_keras_model(file, {.weights = false});
  const std::map<std::string, Shape> shapes = weight_shapes(*k.model);
  return make_layout_map_export(
      keras_file_variables(k, shapes), plan.mesh(),
      [&](const std::string& w) { return plan.weight_layout(w, shapes.at(w)); });
}

TEST(LayoutMapExport, KerasFileMapReadsBackAsThePlan) {
  const DeviceMesh mesh = DeviceMesh::parse("data=2,model=3");
  const ModelParallel plan(mesh, forced_layouts());
  for (const std::string ext : {".keras", ".h5"}) {
    SCOPED_TRACE(ext);
    const LayoutMapExport e = export_of(kKerasFileFixtures + "/lstm_language_model" + ext, plan);
    ASSERT_EQ(e.entries.size(), 9u);
    // Keras 3's paths: a Functional model's layers unscoped, LSTM cells scoped.
    std::set<std::string> paths;
    for (const auto& entry : e.entries) paths.insert(entry.variable.path);
    EXPECT_TRUE(paths.count("lstm_1/lstm_cell/recurrent_kernel"));
    EXPECT_TRUE(paths.count("embedding/embeddings"));
    // Through the JSON and autoshard's LayoutMap (Keras's lookup), every
    // spelling of every variable gets the plan's layout.
    const json j = json::parse(layout_map_json(e));
    const LayoutMap back = LayoutMap::from_json_text(j.at("layout_map").dump(), "export");
    for (const auto& entry : e.entries) {
      const KerasVariable& v = entry.variable;
      std::vector<std::string> spellings = v.other_paths;
      spellings.push_back(v.path);
      EXPECT_FALSE(v.other_paths.empty()) << v.path;
      for (const std::string& p : spellings) {
        const std::optional<TensorLayout> got = back.lookup(p);
        ASSERT_TRUE(got.has_value()) << p;
        EXPECT_EQ(autoshard_sharding(v, *got, mesh), plan.weight_layout(v.weight, v.shape)) << p;
      }
    }
    // Uneven splits are named: 11 logits over 3, LSTM gates 4x7=28 over 3, ...
    const std::vector<std::string> uneven = uneven_splits(e);
    EXPECT_EQ(j.at("uneven_splits").size(), uneven.size());
    EXPECT_EQ(uneven.size(), 5u);
    EXPECT_EQ(uneven.at(0), "embedding/embeddings: dimension 1 (5) over model (3)");
  }
}

TEST(LayoutMapExport, TrainingWithTheReadBackMapEqualsOneDevice) {
  const std::string file = kKerasFileFixtures + "/lstm_language_model.keras";
  const DeviceMesh mesh = DeviceMesh::parse("data=2,model=3");
  const LayoutMapExport e = export_of(file, ModelParallel(mesh, forced_layouts()));
  // The exported map, read back, as layouts of autoshard's weights.
  const LayoutMap back =
      LayoutMap::from_json_text(json::parse(layout_map_json(e)).at("layout_map").dump(), "export");
  LayoutMap by_weight;
  for (const auto& entry : e.entries) {
    const KerasVariable& v = entry.variable;
    const Sharding s = autoshard_sharding(v, *back.lookup(v.path), mesh);
    by_weight["^" + regex_escape(v.weight) + "$"] = TensorLayout::of(s, mesh);
  }
  std::vector<std::vector<double>> losses;
  Shape y_shape;
  for (const bool sharded : {false, true}) {
    KerasModel k = load_keras_model(file);
    k.model->compile(k.compile.make_optimizer(), k.compile.make_losses(), {});
    const Tensor x = testing::random_ids({6, k.inputs[0].shape[0]}, 11, 3);
    if (!sharded) y_shape = k.model->predict(ModelInputs(x)).shape();
    if (sharded) k.model->set_distribution(std::make_shared<ModelParallel>(mesh, by_weight));
    const Tensor y = testing::random_tensor(y_shape, 4);
    losses.emplace_back();
    for (int step = 0; step < 3; ++step)
      losses.back().push_back(k.model->train_on_batch(ModelInputs(x), ModelTargets(y)));
  }
  for (int step = 0; step < 3; ++step)
    EXPECT_NEAR(losses[1][step], losses[0][step], 1e-5 * std::abs(losses[0][step])) << step;
}

// Three Keras variables of one name scheme, checked as Keras would look them up.
LayoutMapExport three_variables(const std::string& second_key) {
  std::vector<KerasVariable> vars(3);
  const char* names[] = {"block_0/dense/kernel", "block_1/dense/kernel", "head/kernel"};
  for (int i = 0; i < 3; ++i) {
    vars[i].path = names[i];
    vars[i].shape = vars[i].weight_shape = {4, 6};
    vars[i].weight = std::string("w") + char('0' + i);
  }
  vars[1].key = second_key;
  const DeviceMesh mesh = DeviceMesh::parse("model=2");
  // w1 is laid out unlike the others.
  return make_layout_map_export(vars, mesh, [](const std::string& w) {
    return w == "w1" ? Sharding{{0, -1}, {}} : Sharding{{-1, 0}, {}};
  });
}

TEST(LayoutMapExport, EveryVariableIsMatchedByExactlyItsOwnKey) {
  EXPECT_EQ(three_variables("").entries.size(), 3u);  // default keys: ^path$
  const auto error_of = [](const std::string& key) {
    try {
      three_variables(key);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // Matches two variables: the first is matched twice.
  EXPECT_NE(error_of("dense/kernel").find("'block_0/dense/kernel'"), std::string::npos);
  EXPECT_NE(error_of("dense/kernel").find("matches two keys"), std::string::npos);
  // Matches nothing: the variable would be left out.
  EXPECT_NE(error_of("^block_9/").find("no key matches Keras variable 'block_1/dense/kernel'"),
            std::string::npos);
  // One key for two variables of different layouts.
  EXPECT_NE(error_of("^block_0/dense/kernel$").find("got the same key"), std::string::npos);
  // Not a regular expression.
  EXPECT_NE(error_of("(").find("not a valid regular expression"), std::string::npos);
}

TEST(LayoutMapExport, FlattenedSplitsLandOnTheHeadsDimension) {
  // A KerasHub query kernel (hidden, heads, head_dim) is autoshard's
  // (hidden, heads * head_dim); a key kernel of one kv head likewise.
  const DeviceMesh mesh = DeviceMesh::parse("data=2,model=4");
  KerasVariable query;
  query.path = "decoder_block_0/attention/query/kernel";
  query.shape = {16, 8, 2};
  query.weight = "q";
  query.weight_shape = {16, 16};
  query.dims_of = {{0}, {1, 2}};
  KerasVariable key = query;
  key.path = "decoder_block_0/attention/key/kernel";
  key.shape = {16, 1, 8};
  key.weight_shape = {16, 8};
  const Sharding split{{-1, 1}, {}};
  const TensorLayout q = keras_layout(query, split, mesh);
  EXPECT_EQ(q.axes, TensorLayout({std::nullopt, "model", std::nullopt}).axes);
  const TensorLayout k = keras_layout(key, split, mesh);  // 1 head: its head_dim splits
  EXPECT_EQ(k.axes, TensorLayout({std::nullopt, std::nullopt, "model"}).axes);
  EXPECT_EQ(autoshard_sharding(query, q, mesh), split);
  EXPECT_EQ(autoshard_sharding(key, k, mesh), split);
  // An output projection (heads, head_dim, hidden) split over its input side.
  KerasVariable out;
  out.path = out.weight = "o";
  out.shape = {8, 2, 16};
  out.weight_shape = {16, 16};
  out.dims_of = {{0, 1}, {2}};
  EXPECT_EQ(keras_layout(out, Sharding{{1, 0}, {}}, mesh).axes,
            TensorLayout({"model", std::nullopt, "data"}).axes);
}

// Every KerasHub backbone of a Hugging Face fixture: AutoShard's plan on
// data=2,model=2 exported, every variable matched by exactly its key, every
// planned weight a variable, and the map read back trains equal to one
// device.
TEST(LayoutMapExport, KerasHubBackbonesReadBackAndTrainAsOneDevice) {
  const DeviceMesh mesh = DeviceMesh::parse("data=2,model=2");
  for (const std::string name :
       {"hf_gpt2", "hf_opt", "hf_llama", "hf_mistral", "hf_qwen2", "hf_gemma"}) {
    SCOPED_TRACE(name);
    const LanguageModelConfig config =
        LanguageModelConfig::of(std::string(AUTOSHARD_TEST_DATA) + "/" + name);
    const Shape batch{4, 8};
    std::vector<double> losses[2];
    LayoutMap by_weight;
    for (const bool sharded : {true, false}) {
      std::unique_ptr<Model> model = config.build(8, 5);
      model->compile(AdamW(), losses::sparse_categorical_crossentropy);
      if (sharded) {  // plan, export, and read back
        auto plan =
            std::make_shared<AutoShard>(mesh, "data", AutoShardOptions{.time_limit_s = 0.2});
        model->set_distribution(plan);
        model->plan_training(batch, batch);
        const std::map<std::string, Shape> shapes = weight_shapes(*model);
        std::string backbone;
        const LayoutMapExport e = make_layout_map_export(
            keras_hub_variables(config.keras_hub_variables(), shapes, &backbone), mesh,
            [&](const std::string& w) { return plan->weight_layout(w, shapes.at(w)); });
        EXPECT_FALSE(backbone.empty());
        // The layers' variables share keys (transformer_layer_\d+/...).
        const json j = json::parse(layout_map_json(e));
        EXPECT_LT(j.at("layout_map").size(), e.entries.size());
        const LayoutMap back = LayoutMap::from_json_text(
            json::parse(layout_map_json(e)).at("layout_map").dump(), "export");
        std::set<std::string> covered;
        for (const auto& entry : e.entries) {
          const KerasVariable& v = entry.variable;
          const std::optional<TensorLayout> got = back.lookup(v.path);
          ASSERT_TRUE(got.has_value()) << v.path;
          EXPECT_EQ(got->axes, entry.layout.axes) << v.path;
          if (v.weight.empty()) continue;
          covered.insert(v.weight);
          const Sharding s = autoshard_sharding(v, *got, mesh);
          by_weight["^" + regex_escape(v.weight) + "$"] = TensorLayout::of(s, mesh);
        }
        for (const auto& [weight, shape] : shapes) EXPECT_TRUE(covered.count(weight)) << weight;
        model = config.build(8, 5);
        model->compile(AdamW(), losses::sparse_categorical_crossentropy);
        model->set_distribution(std::make_shared<ModelParallel>(mesh, by_weight));
      }
      const Tensor x = testing::random_ids(batch, int32_t(config.vocab_size()), 7);
      const Tensor y = testing::random_ids(batch, int32_t(config.vocab_size()), 8);
      for (int step = 0; step < 2; ++step)
        losses[sharded].push_back(model->train_on_batch(ModelInputs(x), ModelTargets(y)));
    }
    for (int step = 0; step < 2; ++step)
      EXPECT_NEAR(losses[1][step], losses[0][step], 1e-4 * std::abs(losses[0][step])) << step;
  }
}

class LayoutMapCli : public TempDirTest {};

TEST_F(LayoutMapCli, ExportsJsonAndPythonThatKerasReadsAsThePlan) {
  const std::string model = kKerasFileFixtures + "/lstm_language_model.keras";
  const fs::path js = dir_ / "map.json", py = dir_ / "map.py", plan = dir_ / "plan.json";
  const std::string common = "plan --model " + model + " --mesh model=3 --batch 6 --plan " +
                             (dir_ / "layouts.json").string();
  {
    std::ofstream f(dir_ / "layouts.json");
    f << R"({"lstm_1\\.recurrent_kernel": [null, "model"], "logits\\.kernel": [null, "model"]})";
  }
  auto r =
      cli_runner::run(common + " --export-layout-map " + js.string() + " --out " + plan.string());
  ASSERT_EQ(r.code, 0) << r.output;
  // Uneven splits: one warning line naming them, and the field.
  EXPECT_EQ(cli_runner::count(r.output, "autoshard: warning: --export-layout-map"), 1) << r.output;
  EXPECT_NE(r.output.find("logits/kernel: dimension 1 (11) over model (3)"), std::string::npos);
  const json exported = json::parse(read_text(js));
  EXPECT_EQ(exported.at("batch_dim_name"), "data");
  // Keras needs the batch axis in its mesh: a data axis of 1 is added.
  EXPECT_EQ(exported.at("mesh").at("axis_names"), json({"data", "model"}));
  EXPECT_EQ(exported.at("mesh").at("shape"), json({1, 3}));
  EXPECT_EQ(exported.at("uneven_splits").size(), 2u);
  EXPECT_GT(exported.at("predicted").value("bytes_per_device", 0.0), 0);
  // Each variable's layout is the plan's layout of its weight.
  const json planned = json::parse(read_text(plan));
  const LayoutMap back = LayoutMap::from_json_text(exported.at("layout_map").dump(), "export");
  ASSERT_EQ(exported.at("variables").size(), 9u);
  for (const auto& [path, v] : exported.at("variables").items()) {
    const std::optional<TensorLayout> got = back.lookup(path);
    ASSERT_TRUE(got.has_value()) << path;
    json axes = json::array();
    for (const TensorLayout::Axes& a : got->axes)
      axes.push_back(a.empty() ? json() : a.size() == 1 ? json(a[0]) : json(a));
    EXPECT_EQ(axes, planned.at("parameters").at(v.at("autoshard_weight")).at("layout")) << path;
  }
  // The .py form: Python's re on Keras's lookup rule gives the same layouts
  // (keras itself stubbed: the tests need no Keras).
  r = cli_runner::run(common + " --export-layout-map " + py.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string text = read_text(py);
  EXPECT_NE(text.find("def get_layout_map(device_mesh):"), std::string::npos);
  EXPECT_NE(
      text.find("layout_map[\"^(?:lstm_language_model/)?logits/kernel$\"] = (None, \"model\")"),
      std::string::npos)
      << text;
  if (!fs::exists("/usr/bin/python3")) GTEST_SKIP() << "no /usr/bin/python3 to run the .py";
  {
    std::ofstream f(dir_ / "check.py");
    f << R"(import importlib.util, json, re, sys, types
class LayoutMap(dict):  # Keras 3's lookup: exact key, else exactly one re.search
    def __init__(self, mesh):
        super().__init__()
    def __setitem__(self, key, layout):
        assert key not in self, key
        super().__setitem__(key, layout)
    def __getitem__(self, path):
        if dict.__contains__(self, path):
            return dict.__getitem__(self, path)
        keys = [k for k in self.keys() if re.search(k, path)]
        assert len(keys) <= 1, (path, keys)
        return dict.__getitem__(self, keys[0]) if keys else None
keras = types.ModuleType("keras")
keras.distribution = types.SimpleNamespace(LayoutMap=LayoutMap)
sys.modules["keras"] = keras
spec = importlib.util.spec_from_file_location("exported", sys.argv[1])
m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
layout_map = m.get_layout_map(types.SimpleNamespace(axis_names=m.MESH_AXIS_NAMES))
variables = json.load(open(sys.argv[2]))["variables"]
for path, v in variables.items():
    for p in (path, "lstm_language_model/" + path):
        assert layout_map[p] == tuple(v["layout"]), (p, layout_map[p], v["layout"])
assert len(m.UNEVEN_SPLITS) == 2 and m.BATCH_DIM_NAME == "data"
print("python agrees on", len(variables), "variables")
)";
  }
  FILE* p = popen(("/usr/bin/python3 " + (dir_ / "check.py").string() + " " + py.string() + " " +
                   js.string() + " 2>&1")
                      .c_str(),
                  "r");
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << out;
  EXPECT_NE(out.find("python agrees on 9 variables"), std::string::npos) << out;
}

TEST_F(LayoutMapCli, KerasHubPresetExportsItsBackbone) {
  const fs::path js = dir_ / "gemma.json";
  const auto r = cli_runner::run("plan --model " + std::string(AUTOSHARD_TEST_DATA) +
                                 "/keras_hub/gemma --mesh model=2 --batch 4 --seq 8 --plan-time "
                                 "0.2 --divisible --export-layout-map " +
                                 js.string());
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(read_text(js));
  EXPECT_NE(j.at("model").get<std::string>().find("(KerasHub GemmaBackbone)"), std::string::npos);
  // One key for the query kernels of every decoder block.
  EXPECT_EQ(j.at("variables").at("decoder_block_0/attention/query/kernel").at("key"),
            "^decoder_block_\\d+/attention/query/kernel$");
  EXPECT_TRUE(j.at("uneven_splits").empty());  // --divisible
  EXPECT_TRUE(j.at("divisible").get<bool>());
  EXPECT_FALSE(j.at("lost_splits").empty());
}

TEST_F(LayoutMapCli, BadExportsAreOneLineErrors) {
  const std::string model = kKerasFileFixtures + "/lstm_language_model.keras";
  const auto run = [&](const std::string& args) { return cli_runner::run("plan " + args); };
  auto r = run("--model " + model + " --mesh model=2 --export-layout-map " +
               (dir_ / "map.txt").string());
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("must end in .json or .py"), std::string::npos) << r.output;
  r = run("--model " + model + " --mesh model=2 --plan data --divisible");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--divisible restricts AutoShard's choices"), std::string::npos)
      << r.output;
  r = run("--model " + model + " --mesh data=4 --batch 6 --divisible");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("--divisible: the batch of 6 does not divide"), std::string::npos)
      << r.output;
  EXPECT_EQ(cli_runner::count(r.output, "autoshard: error:"), 1) << r.output;
  // An existing file is not replaced.
  std::ofstream(dir_ / "there.json") << "{}";
  r = run("--model " + model + " --mesh model=2 --export-layout-map " +
          (dir_ / "there.json").string());
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(read_text(dir_ / "there.json"), "{}");
}

// Gemma 2B's dimensions (hidden 2048, 8 heads of 256, one kv head, MLP 16384,
// vocabulary 256000, 18 layers), planned without weights.
TEST(LayoutMapDivisible, Gemma2BSplitsOnlyWhereTheAxisDivides) {
  const std::string config = std::string(AUTOSHARD_TEST_DATA) + "/gemma_2b_shapes/config.json";
  for (const int k : {2, 4, 8, 3}) {
    SCOPED_TRACE("model=" + std::to_string(k));
    const auto r = cli_runner::run("plan --model " + config + " --mesh model=" + std::to_string(k) +
                                   " --divisible --batch 2 --seq 16 --plan-time 0.5 "
                                   "--memory-per-device 80GiB --json");
    ASSERT_EQ(r.code, 0) << r.output;
    const json j = json::parse(r.output);
    int splits = 0;
    for (const auto& [path, p] : j.at("parameters").items())
      for (size_t d = 0; d < p.at("layout").size(); ++d) {
        if (p.at("layout")[d].is_null()) continue;
        ++splits;
        EXPECT_EQ(p.at("shape")[d].get<int64_t>() % k, 0) << path << " dimension " << d;
      }
    const json& lost = j.at("lost_splits");
    ASSERT_FALSE(lost.empty());
    EXPECT_EQ(
        lost.back().get<std::string>().rfind(k == 3 ? "cost of --divisible" : "no split lost", 0),
        0u)
        << lost.dump();
    if (k != 3) {
      EXPECT_GT(splits, 0) << "the model is split, not replicated";
    } else {  // on 3 devices nothing of Gemma 2B divides: the MLP's split is lost
      EXPECT_NE(lost.dump().find("layers.*.mlp.up_proj.kernel (18 weights)"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace autoshard
