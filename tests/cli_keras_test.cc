// `autoshard predict`, `evaluate` and `train --model FILE` end to end on the
// TensorFlow.js fixtures of tests/data/keras_layers (made by TF.js itself,
// tools/keras_fixtures/): each model's directory is copied with a
// trainingConfig added (TF.js's Adam at the fixtures' settings and the
// fixture's losses), its inputs and targets written as .npy/.npz, and the
// commands' predictions and per-step losses compared with TF.js's on one
// device, model=3 and data=2,model=2 (1e-5 of the largest output, 1e-4 of
// the loss). Bad data and flags end in one error line naming the file.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/io/keras_model.h"
#include "autoshard/io/npy.h"
#include "autoshard/io/safetensors.h"
#include "cli_runner.h"
#include "keras_fixtures.h"

namespace autoshard {
namespace {

using testing::keras_fixture_spec;
using testing::kKerasLayerFixtures;

using cli_runner::Result;
using cli_runner::run;

namespace fs = std::filesystem;
using nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Keras's loss object for a fixture loss ({"name": ..., "from_logits": ...}).
json loss_object(const json& loss) {
  std::string cls;
  bool upper = true;
  for (char c : loss.at("name").get<std::string>()) {
    if (c == '_') {
      upper = true;
      continue;
    }
    cls += upper ? static_cast<char>(std::toupper(c)) : c;
    upper = false;
  }
  json config = loss;
  config.erase("name");
  return {{"class_name", cls}, {"config", config}};
}

// A fixture copied to a directory of its own, ready for the commands:
// model.json (with a trainingConfig), its weights, x and y files.
class CliFixture {
 public:
  explicit CliFixture(const std::string& name) : name_(name), spec_(keras_fixture_spec(name)) {
    dir_ = fs::temp_directory_path() / ("cli_keras_" + std::to_string(::getpid()) + "_" + name);
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    json model = read_json(kKerasLayerFixtures + "/" + spec_.at("tfjs").get<std::string>());
    const json adam = read_json(kKerasLayerFixtures + "/index.json").at("optimizers").at("adam");
    json losses = json::array();
    for (const json& l : spec_.at("losses")) losses.push_back(loss_object(l));
    model["trainingConfig"] = {{"optimizer_config",
                                {{"class_name", "Adam"},
                                 {"config",
                                  {{"learningRate", adam.at("learning_rate")},
                                   {"beta1", adam.at("beta_1")},
                                   {"beta2", adam.at("beta_2")},
                                   {"epsilon", adam.at("epsilon")}}}}},
                               {"loss", losses},
                               {"loss_weights", spec_.at("loss_weights")},
                               {"metrics", json::array()}};
    std::ofstream(dir_ / "model.json") << model.dump();
    for (const json& group : model.value("weightsManifest", json::array()))
      for (const json& p : group.at("paths"))
        fs::copy_file(fs::path(kKerasLayerFixtures) / "tfjs" / p.get<std::string>(),
                      dir_ / p.get<std::string>());
    tensors_ = std::make_unique<SafetensorsFile>(kKerasLayerFixtures + "/" +
                                                 spec_.at("file").get<std::string>());
    x_ = write_arrays("input/", "x");
    y_ = write_arrays("target/", "y");
  }
  ~CliFixture() { fs::remove_all(dir_); }

  std::string model() const { return (dir_ / "model.json").string(); }
  const std::string& x() const { return x_; }
  const std::string& y() const { return y_; }
  std::string path(const std::string& file) const { return (dir_ / file).string(); }
  int64_t batch() const { return spec_.at("batch").get<int64_t>(); }
  bool trains() const { return tensors_->contains("steps/adam"); }
  Tensor tensor(const std::string& name) const { return tensors_->load(name); }
  // The fixture's expected outputs, by output name.
  std::vector<std::pair<std::string, Tensor>> outputs() const {
    std::vector<std::pair<std::string, Tensor>> out;
    for (const json& o : spec_.at("outputs"))
      out.emplace_back(o.get<std::string>(), tensors_->load("output/" + o.get<std::string>()));
    return out;
  }

 private:
  // The tensors under `prefix` as one .npy, or an .npz keyed by name.
  std::string write_arrays(const std::string& prefix, const std::string& stem) {
    std::vector<std::pair<std::string, Tensor>> arrays;
    for (const SafetensorsEntry& e : tensors_->entries())
      if (e.name.starts_with(prefix))
        arrays.emplace_back(e.name.substr(prefix.size()), tensors_->load(e.name));
    const std::string file = path(stem + (arrays.size() == 1 ? ".npy" : ".npz"));
    write_file(file, arrays.size() == 1 ? npy_bytes(arrays[0].second) : npz_bytes(arrays));
    return file;
  }

  std::string name_;
  json spec_;
  fs::path dir_;
  std::unique_ptr<SafetensorsFile> tensors_;
  std::string x_, y_;
};

double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, double(std::abs(t.f32()[i])));
  return m;
}

// predict's file against the fixture's outputs (1e-5 of the largest).
void expect_predictions(const CliFixture& f, const std::string& file) {
  const auto got = read_arrays(file, "predictions");
  for (const auto& [name, want] : f.outputs()) {
    const NpyArray& g = got.size() == 1 ? got.begin()->second : got.at(name);
    ASSERT_EQ(g.tensor.shape(), want.shape()) << name;
    const double tol = 1e-5 * std::max(1.0, max_abs(want));
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(g.tensor.f32()[i], want.f32()[i], tol) << name << " element " << i;
  }
}

// The losses of a --log file.
std::vector<double> logged_losses(const std::string& log) {
  std::vector<double> out;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line).at("loss"));
  return out;
}

const char* const kMeshes[] = {"", "--mesh model=3", "--mesh data=2,model=2",
                               "--mesh data=2,model=2 --plan fsdp"};  // FSDP over both axes

// Models run on every mesh (one of each kind: normalization over a split
// batch, several inputs with a shared layer, several outputs with sparse and
// dense targets and loss weights, int32 token ids into an Embedding and
// LSTMs); each other model runs on one mesh, by its place in the list, to
// keep the test to a few seconds.
const std::vector<std::string> kEveryMesh = {"resnet_cnn", "siamese", "two_outputs",
                                             "lstm_language_model"};
const std::vector<std::string> kOneMesh = {
    "activation_gelu", "conv2d_stride2_same", "batch_normalization_dense",
    "lstm_last",       "concatenate",         "loss_sparse_categorical_logits"};

// Predictions and 4 Adam steps of each model.
class CliKerasFixtures : public ::testing::TestWithParam<std::string> {};

TEST_P(CliKerasFixtures, PredictAndTrainMatchTensorFlowJs) {
  CliFixture f(GetParam());
  const auto one = std::find(kOneMesh.begin(), kOneMesh.end(), GetParam());
  for (size_t m = 0; m < std::size(kMeshes); ++m) {
    if (one != kOneMesh.end() && size_t(one - kOneMesh.begin()) % std::size(kMeshes) != m) continue;
    const std::string mesh = kMeshes[m];
    SCOPED_TRACE("mesh: " + mesh);
    const std::string out =
        f.path("pred" + std::to_string(m) + (f.outputs().size() > 1 ? ".npz" : ".npy"));
    const Result p =
        run("predict --model " + f.model() + " --x " + f.x() + " --out " + out + " " + mesh);
    ASSERT_EQ(p.code, 0) << p.output;
    expect_predictions(f, out);
    if (!f.trains()) continue;
    const std::string log = out + ".jsonl";
    const Result t = run("train --model " + f.model() + " --x " + f.x() + " --y " + f.y() +
                         " --batch " + std::to_string(f.batch()) +
                         " --steps 4 --sampling sequential --lr-schedule constant --clip 0 "
                         "--verbose 0 --log " +
                         log + " " + mesh);
    ASSERT_EQ(t.code, 0) << t.output;
    const std::vector<double> losses = logged_losses(log);
    const Tensor want = f.tensor("steps/adam");
    ASSERT_EQ(losses.size(), 4u);
    for (int s = 0; s < 4; ++s)
      EXPECT_NEAR(losses[s], want.f32()[s], 1e-4 * std::max(1.0, std::abs(double(want.f32()[s]))))
          << "step " << s + 1 << "\n"
          << t.output;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryMesh, CliKerasFixtures, ::testing::ValuesIn(kEveryMesh));
INSTANTIATE_TEST_SUITE_P(OneMesh, CliKerasFixtures, ::testing::ValuesIn(kOneMesh));

// A .keras file of the Keras layer table's preprocessing layers
// (RandomCrop, Resizing with crop and pad to the aspect ratio;
// tools/keras_files/make_family_files.py) predicts from the command line as
// the C++ reader does, which tests/keras_preprocessing_test.cc checks
// against references; the categorical file reads its ids.
TEST(CliKeras, PredictsFilesOfPreprocessingLayers) {
  testing::ScratchDir dir("cli_keras_preprocessing");
  for (const auto& [name, x] :
       {std::pair<std::string, Tensor>{"keras3_resizing.keras",
                                       testing::random_tensor({5, 7, 6, 3}, 4)},
        {"keras3_categories.keras", testing::random_tensor({5, 3}, 5)}}) {
    const std::string model = testing::kKerasFileFixtures + "/families/" + name;
    const std::string xf = (dir.path / (name + ".x.npy")).string();
    const std::string out = (dir.path / (name + ".out.npy")).string();
    write_file(xf, npy_bytes(x));
    const Result r =
        run("predict --model " + model + " --x " + xf + " --out " + out + " --mesh data=2,model=2");
    ASSERT_EQ(r.code, 0) << r.output;
    const Tensor want = load_keras_model(model).model->predict(x);
    const auto got = read_arrays(out, "predictions");
    ASSERT_EQ(got.begin()->second.tensor.shape(), want.shape()) << name;
    EXPECT_LT(max_relative_error(got.begin()->second.tensor, want), 1e-5) << name;
  }
}

TEST(CliKeras, EvaluatePrintsTheLossAndJson) {
  CliFixture f("loss_sparse_categorical_logits");
  const Result r = run("evaluate --model " + f.model() + " --x " + f.x() + " --y " + f.y() +
                       " --json --mesh model=2");
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(r.output);
  EXPECT_NEAR(j.at("loss").get<double>(), f.tensor("loss").f32()[0], 1e-5);
  EXPECT_EQ(j.at("examples"), 3);
  const Result text = run("evaluate --model " + f.model() + " --x " + f.x() + " --y " + f.y());
  ASSERT_EQ(text.code, 0) << text.output;
  EXPECT_NE(text.output.find("1/1 "), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("loss: "), std::string::npos) << text.output;
}

TEST(CliKeras, TrainShowsKerasProgressAndValidation) {
  CliFixture f("activation_gelu");
  const Result r =
      run("train --model " + f.model() + " --x " + f.x() + " --y " + f.y() + " --validation-x " +
          f.x() + " --validation-y " + f.y() + " --batch 2 --epochs 2 --verbose 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("Epoch 2/2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2/2 - "), std::string::npos) << r.output;  // 3 rows in batches of 2
  EXPECT_NE(r.output.find("val_loss: "), std::string::npos) << r.output;
}

// Checkpoints: 2 steps, then --resume to 5 (past an epoch of 2 shuffled
// batches, on another mesh) gives the losses of 5 steps at once.
TEST(CliKeras, ResumedTrainingContinuesTheSameRun) {
  CliFixture f("batch_normalization_dense");
  const std::string base = "train --model " + f.model() + " --x " + f.x() + " --y " + f.y() +
                           " --batch 2 --verbose 0 --sampling random ";
  const Result whole = run(base + "--seed 7 --steps 5 --log " + f.path("whole.jsonl"));
  ASSERT_EQ(whole.code, 0) << whole.output;
  const std::string ckpt = "--checkpoint-dir " + f.path("ckpt") + " --log " + f.path("part.jsonl");
  const Result first = run(base + "--seed 7 --steps 2 " + ckpt);
  ASSERT_EQ(first.code, 0) << first.output;
  const Result rest = run(base + "--seed 7 --steps 5 --resume --mesh model=2 " + ckpt);
  ASSERT_EQ(rest.code, 0) << rest.output;
  const std::vector<double> a = logged_losses(f.path("whole.jsonl"));
  const std::vector<double> b = logged_losses(f.path("part.jsonl"));
  ASSERT_EQ(a.size(), 5u);
  ASSERT_EQ(b.size(), 5u);
  for (size_t s = 0; s < 5; ++s) EXPECT_NEAR(a[s], b[s], 1e-5 * std::max(1.0, a[s])) << s;
  const Result again = run(base + "--steps 6 --seed 8 --resume " + ckpt);
  EXPECT_EQ(again.code, 1);
  EXPECT_NE(again.output.find("was trained with --seed 7"), std::string::npos) << again.output;
}

// Bad data and flags: exit 1 and one line naming what is wrong.
TEST(CliKeras, BadInputIsOneErrorLine) {
  CliFixture f("concatenate");
  CliFixture one("activation_gelu");
  const std::string wrong_shape = f.path("wrong.npz");
  write_file(wrong_shape, npz_bytes({{"a", Tensor({3, 3, 5})}, {"b", Tensor({3, 3, 2})}}));
  const std::string missing = f.path("missing.npz");
  write_file(missing, npz_bytes({{"a", Tensor({3, 3, 4})}}));
  const std::string extra = f.path("extra.npz");
  write_file(extra,
             npz_bytes({{"a", Tensor({3, 3, 4})}, {"b", Tensor({3, 3, 2})}, {"c", Tensor({3})}}));
  const std::string labels = f.path("labels.npy");
  write_file(labels, npy_bytes(Tensor::from_ints({3, 1}, {0, 7, 1})));
  const std::string fractional = f.path("fractional.npy");
  write_file(fractional, npy_bytes(Tensor::from({3}, {0, 1.5f, 1})));
  const std::string existing = f.path("exists.npy");
  write_file(existing, "");
  CliFixture sparse("loss_sparse_categorical_logits");
  const std::string base1 = "predict --model " + f.model() + " --out " + f.path("p.npy");
  const std::string train1 =
      "train --model " + one.model() + " --x " + one.x() + " --y " + one.y() + " --verbose 0";
  const std::string sparse_eval = "evaluate --model " + sparse.model() + " --x " + sparse.x();
  const std::pair<std::string, std::string> cases[] = {
      {base1 + " --x " + wrong_shape,
       "input 'a' is [3, 4] per example (-1: any), the data gives [3, 5]"},
      {base1 + " --x " + missing, "has no array 'b'"},
      {base1 + " --x " + extra, "holds array 'c', which is no input"},
      {base1 + " --x " + one.x(), "is one array (.npy) but the model has 2 inputs (a, b)"},
      {base1 + " --x " + f.path("nothing.npy"), "cannot be read"},
      {"predict --model " + one.model() + " --x " + one.x() + " --out " + f.path("p.txt"),
       "must end in .npy"},
      {"predict --model " + one.model() + " --x " + one.x() + " --out " + existing,
       "already exists"},
      {"predict --model " + kKerasLayerFixtures + "/index.json --x " + one.x() + " --out " +
           f.path("q.npy"),
       ""},
      {sparse_eval + " --y " + labels, "class id 7"},
      {sparse_eval + " --y " + fractional, "element [1] is 1.5 where whole numbers"},
      {train1 + " --epochs 2 --steps 3", "give --epochs or --steps, not both"},
      {train1 + " --data x.txt", "--data applies to GPT training"},
      {train1 + " --mesh data=2 --microbatches 2", "--microbatches applies to GPT training"},
      {train1 + " --mesh pipe=2", "a pipe axis runs only when training a language model"},
      {train1 + " --plan megatron --mesh model=2", "Megatron-LM's layout"},
      {train1 + " --save " + existing, "already exists"},
      {train1 + " --optimizer adamax", "--optimizer 'adamax' is not one of"},
      {"train --model " + one.model() + " --x " + one.x(), "needs --x and --y"},
  };
  for (const auto& [args, expected] : cases) {
    SCOPED_TRACE(args);
    const Result r = run(args);
    EXPECT_EQ(r.code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("autoshard: error: ", 0), 0u) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_NE(r.output.find(expected), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace autoshard
