// Keras's Resizing, CategoryEncoding, Discretization and RandomCrop as the
// Keras layer table builds them from a config (what the file readers and Python's
// autoshard.keras do): Resizing against TensorFlow.js's own resize ops
// (tests/data/keras_layers/resizing_reference.json, written by
// tools/keras_fixtures/resizing_reference.mjs), its aspect-ratio crop and
// pad against resizing what the test crops or pads itself, the categorical
// layers against counts and numpy.digitize written here, RandomCrop's
// windows told apart by their losses; every one on one device and on meshes; a model resizing its
// images trains sharded as on one device; and the files of tools/keras_files/make_family_files.py
// (Keras 3 .keras, tf-keras .h5) predict against references computed here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/io/keras_model.h"
#include "autoshard/nn/conv_layers.h"
#include "autoshard/nn/layers.h"
#include "autoshard/nn/losses.h"
#include "autoshard/nn/model.h"
#include "autoshard/nn/preprocessing_layers.h"
#include "autoshard/nn/reshaping_layers.h"
#include "autoshard/optim/optimizers.h"
#include "autoshard/plan/distribution.h"
#include "io/keras/layer_table.h"
#include "keras_fixtures.h"
#include "test_util.h"

namespace autoshard {
namespace keras_preprocessing_test {

using nlohmann::json;
using testing::kKerasFileFixtures;
using testing::kKerasLayerFixtures;
using testing::random_tensor;

const char* const kMeshes[] = {"", "model=3", "data=2,model=2"};

// The layer the Keras layer table builds from `config`.
Layer from_table(const std::string& cls, json config) {
  keras::LayerSpec spec;
  spec.cls = cls;
  spec.name = config.value("name", "layer");
  spec.config = std::move(config);
  return keras::build_layer(spec, keras::BuildContext{}).layer;
}

void distribute(Model& m, const std::string& mesh) {
  if (!mesh.empty())
    m.set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data",
                                                   AutoShardOptions{.time_limit_s = 0.1}));
}

// `layer` alone as a model, predicting x on `mesh` ("" for one device).
Tensor predict(const Layer& layer, const Tensor& x, const std::string& mesh = "") {
  auto in = Input(Shape(x.shape().begin() + 1, x.shape().end()), x.dtype());
  Model m({in}, layer(in));
  distribute(m, mesh);
  return m.predict(x);
}

Tensor tensor_of(const json& nested) {
  Shape shape;
  for (const json* j = &nested; j->is_array(); j = &j->at(0)) shape.push_back(j->size());
  std::vector<float> flat;
  std::function<void(const json&)> walk = [&](const json& j) {
    if (j.is_array())
      for (const json& e : j) walk(e);
    else
      flat.push_back(j.get<float>());
  };
  walk(nested);
  return Tensor::from(shape, std::span<const float>(flat));
}

// x [b, h, w, c] with rows [top, top + h') and columns [left, left + w')
// kept, or padded with `fill` by the given counts (negative: cropped).
Tensor pad_image(const Tensor& x, int64_t top, int64_t bottom, int64_t left, int64_t right,
                 float fill) {
  const Shape& s = x.shape();
  const int64_t h = s[1] + top + bottom, w = s[2] + left + right;
  Tensor out({s[0], h, w, s[3]});
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j)
        for (int64_t c = 0; c < s[3]; ++c) {
          const int64_t si = i - top, sj = j - left;
          const bool inside = si >= 0 && si < s[1] && sj >= 0 && sj < s[2];
          out.f32()[((b * h + i) * w + j) * s[3] + c] =
              inside ? x.f32()[((b * s[1] + si) * s[2] + sj) * s[3] + c] : fill;
        }
  return out;
}

json resizing(int64_t h, int64_t w, const std::string& interpolation) {
  return {{"name", "resizing"},
          {"height", h},
          {"width", w},
          {"interpolation", interpolation},
          {"data_format", "channels_last"},
          {"fill_mode", "constant"},
          {"crop_to_aspect_ratio", false},
          {"pad_to_aspect_ratio", false},
          {"fill_value", 0.0},
          {"antialias", false}};
}

TEST(KerasPreprocessing, ResizingMatchesTensorFlowJs) {
  std::ifstream in(kKerasLayerFixtures + "/resizing_reference.json");
  ASSERT_TRUE(in.good());
  const json ref = json::parse(in);
  const Tensor x = tensor_of(ref.at("input"));
  for (const json& c : ref.at("outputs")) {
    const Tensor want = tensor_of(c.at("output"));
    for (const char* mesh : kMeshes) {
      const Tensor got = predict(
          from_table("Resizing", resizing(c.at("height"), c.at("width"), c.at("interpolation"))), x,
          mesh);
      ASSERT_EQ(got.shape(), want.shape());
      for (int64_t e = 0; e < want.numel(); ++e)
        ASSERT_NEAR(got.f32()[e], want.f32()[e], 1e-5)
            << c.at("height") << "x" << c.at("width") << " " << c.at("interpolation") << " on '"
            << mesh << "' element " << e;
    }
  }
}

// keras.ops.image.resize's crop_to_aspect_ratio keeps the central window of
// the target's ratio, int(w * H / W) rows or int(h * W / H) columns
// starting at int((in - kept) / 2); pad_to_aspect_ratio adds fill_value rows
// (or columns) on both sides, int((padded - in) / 2) each.
TEST(KerasPreprocessing, ResizingCropsAndPadsToTheAspectRatio) {
  const Tensor x = random_tensor({2, 7, 6, 3}, 5);
  json crop = resizing(5, 2, "bilinear");  // ratio 5:2 of 7x6: 7 rows, int(7 * 2 / 5) = 2 columns
  crop["crop_to_aspect_ratio"] = true;
  const Tensor cropped = pad_image(x, 0, 0, -2, -2, 0);
  json pad = resizing(4, 9, "nearest");  // ratio 4:9 of 7x6: int(7 * 9 / 4) = 15 columns
  pad["pad_to_aspect_ratio"] = true;
  pad["fill_value"] = -0.75;
  const Tensor padded = pad_image(x, 0, 0, 4, 4, -0.75f);
  for (const char* mesh : kMeshes) {
    EXPECT_LT(
        max_relative_error(predict(from_table("Resizing", crop), x, mesh),
                           predict(from_table("Resizing", resizing(5, 2, "bilinear")), cropped)),
        1e-6)
        << mesh;
    EXPECT_LT(
        max_relative_error(predict(from_table("Resizing", pad), x, mesh),
                           predict(from_table("Resizing", resizing(4, 9, "nearest")), padded)),
        1e-6)
        << mesh;
  }
  pad["crop_to_aspect_ratio"] = true;
  EXPECT_THROW(from_table("Resizing", pad), Error);
  EXPECT_THROW(from_table("Resizing", resizing(4, 4, "bicubic")), Error);
  json alias = resizing(4, 4, "bilinear");
  alias["antialias"] = true;
  EXPECT_THROW(from_table("Resizing", alias), Error);
}

// Resizing is linear: gradients flow through it to the layers before, and
// a model that resizes between two convolutions trains alike on meshes.
std::vector<double> train_resizing_cnn(const std::string& mesh) {
  auto in = Input({7, 6, 2});
  SymbolicTensor h = Conv2D(3, {3}, ConvOptions().padding("same").name("a"))(in);
  json up = resizing(9, 5, "bilinear"), down = resizing(4, 4, "nearest");
  up["name"] = "up";
  down["name"] = "down";
  h = from_table("Resizing", up)(h);
  h = from_table("Resizing", down)(h);
  h = Conv2D(2, {2}, ConvOptions().name("b"))(h);
  Model model({in}, Dense(2, DenseOptions().name("c"))(Flatten()(h)));
  distribute(model, mesh);
  model.compile(SGD({.learning_rate = 0.05}), losses::mean_squared_error);
  std::vector<double> losses;
  for (int s = 0; s < 4; ++s)
    losses.push_back(
        model.train_on_batch(random_tensor({4, 7, 6, 2}, 30 + s), random_tensor({4, 2}, 40 + s)));
  return losses;
}

TEST(KerasPreprocessing, ResizingTrainsShardedAsOnOneDevice) {
  const std::vector<double> one = train_resizing_cnn("");
  EXPECT_LT(one.back(), one.front());  // the first convolution learns through both resizes
  for (const char* mesh : {"model=3", "data=2,model=2"}) {
    const std::vector<double> sharded = train_resizing_cnn(mesh);
    for (size_t s = 0; s < one.size(); ++s)
      EXPECT_NEAR(sharded[s], one[s], 1e-4 * one[s]) << mesh << " step " << s;
  }
}

// Per example, how often each id occurs (the reference of "count").
std::vector<float> counts(const std::vector<int32_t>& ids, int64_t rows, int64_t tokens) {
  const int64_t per = static_cast<int64_t>(ids.size()) / rows;
  std::vector<float> out(rows * tokens, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < per; ++k) out[r * tokens + ids[r * per + k]] += 1;
  return out;
}

std::vector<float> values(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

TEST(KerasPreprocessing, CategoryEncodingCountsIds) {
  const std::vector<int32_t> ids = {0, 3, 3, 5, 1, 1, 1, 1, 4, 2, 0, 5, 5, 2, 3, 0};
  const Tensor x = Tensor::from(Shape{4, 4}, std::span<const int32_t>(ids));
  const std::vector<float> count = counts(ids, 4, 6);
  std::vector<float> multi = count;
  for (float& v : multi) v = std::min(v, 1.0f);
  for (const char* mesh : kMeshes) {
    EXPECT_EQ(values(predict(
                  from_table("CategoryEncoding", {{"num_tokens", 6}, {"output_mode", "count"}}), x,
                  mesh)),
              count)
        << mesh;
    EXPECT_EQ(values(predict(from_table("CategoryEncoding", {{"num_tokens", 6}}), x, mesh)),
              multi)
        << mesh;  // multi_hot is Keras's default
  }
  // one_hot: a trailing axis of 1 is replaced, any other kept.
  const Tensor column = Tensor::from(Shape{4, 1}, std::span<const int32_t>(ids.data(), 4));
  const Layer hot = from_table("CategoryEncoding", {{"num_tokens", 6}, {"output_mode", "one_hot"}});
  const Tensor one = predict(hot, column, "data=2,model=2");
  ASSERT_EQ(one.shape(), (Shape{4, 6}));
  EXPECT_EQ(values(one), counts({0, 3, 3, 5}, 4, 6));
  const Tensor all = predict(hot, x);
  ASSERT_EQ(all.shape(), (Shape{4, 4, 6}));
  EXPECT_EQ(values(all), counts(ids, 16, 6));
  // Keras raises on an id outside [0, num_tokens); so does the step here.
  EXPECT_THROW(predict(hot, Tensor::from_ints({2, 1}, {1, 6})), Error);
  EXPECT_THROW(from_table("CategoryEncoding", {{"num_tokens", 6}, {"output_mode", "tf_idf"}}),
               Error);
}

// numpy.digitize(x, bins) with increasing bins: the count of bins <= x.
float digitize(float x, const std::vector<double>& bins) {
  return static_cast<float>(std::upper_bound(bins.begin(), bins.end(), double(x)) - bins.begin());
}

TEST(KerasPreprocessing, DiscretizationBucketsAsDigitize) {
  const std::vector<double> bins = {-1.0, 0.0, 0.0, 0.5, 2.0};  // equal neighbours allowed
  Tensor x = random_tensor({6, 5}, 9, 1.5f);
  for (int64_t e = 0; e < 5; ++e) x.f32()[e] = static_cast<float>(bins[e]);  // on the edges
  std::vector<float> want;
  for (int64_t e = 0; e < x.numel(); ++e) want.push_back(digitize(x.f32()[e], bins));
  const json config = {{"name", "discretization"}, {"bin_boundaries", bins}, {"num_bins", nullptr},
                       {"epsilon", 0.01},          {"output_mode", "int"},   {"sparse", false},
                       {"dtype", "int64"}};  // tf-keras's int mode saves dtype int64
  for (const char* mesh : kMeshes)
    EXPECT_EQ(values(predict(from_table("Discretization", config), x, mesh)), want) << mesh;
  EXPECT_EQ(std::vector<float>(want.begin(), want.begin() + 5),
            (std::vector<float>{1, 3, 3, 4, 5}));  // a boundary starts its bucket
  json down = config;
  down["bin_boundaries"] = {1.0, 0.0};
  EXPECT_THROW(from_table("Discretization", down), Error);
  json unadapted = config;
  unadapted["bin_boundaries"] = nullptr;
  unadapted["num_bins"] = 4;
  EXPECT_THROW(from_table("Discretization", unadapted), Error);
  json hot = config;
  hot["output_mode"] = "one_hot";
  EXPECT_THROW(from_table("Discretization", hot), Error);
}

// RandomCrop(3, 2) in training: each step's loss against a fixed window,
// through Flatten and an identity Dense that never moves, tells which
// window the step cropped (the same for both images, as Keras crops a
// batch alike); they change from step to step and are the same on meshes.
std::vector<double> random_crop_losses(const json& config, const Tensor& x, const Tensor& target,
                                       const std::string& mesh) {
  auto in = Input({6, 5, 1});
  SymbolicTensor h = Flatten()(from_table("RandomCrop", config)(in));
  Model model({in}, Dense(6, DenseOptions().use_bias(false).name("d"))(h));
  distribute(model, mesh);
  model.compile(SGD({.learning_rate = 1e-30}), losses::mean_squared_error);
  Tensor eye({6, 6});
  for (int64_t e = 0; e < 36; ++e) eye.f32()[e] = e % 7 == 0 ? 1.0f : 0.0f;
  model.set_weight("d.kernel", eye);
  std::vector<double> losses;
  for (int s = 0; s < 30; ++s) losses.push_back(model.train_on_batch(x, target));
  return losses;
}

TEST(KerasPreprocessing, RandomCropDrawsOneWindowPerStep) {
  const Tensor x = random_tensor({2, 6, 5, 1}, 21);
  auto window = [&](int64_t top, int64_t left) {
    Tensor w({2, 6});
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 2; ++j)
          w.f32()[b * 6 + i * 2 + j] = x.f32()[(b * 6 + top + i) * 5 + left + j];
    return w;
  };
  const Tensor target = window(1, 2);
  const json config = {{"name", "random_crop"}, {"height", 3}, {"width", 2}, {"seed", 7}};
  const std::vector<double> losses = random_crop_losses(config, x, target, "");
  std::set<std::pair<int64_t, int64_t>> seen;
  for (double loss : losses) {
    std::vector<std::pair<int64_t, int64_t>> match;
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t l = 0; l < 4; ++l) {
        const Tensor w = window(t, l);
        double mse = 0;
        for (int64_t e = 0; e < 12; ++e) mse += std::pow(w.f32()[e] - target.f32()[e], 2) / 12;
        if (std::abs(mse - loss) < 1e-4 * (1 + loss)) match.emplace_back(t, l);
      }
    ASSERT_EQ(match.size(), 1u) << loss;
    seen.insert(match[0]);
  }
  EXPECT_GE(seen.size(), 8u);  // 16 windows, drawn anew each step
  for (const char* mesh : {"model=3", "data=2,model=2"}) {
    const std::vector<double> sharded = random_crop_losses(config, x, target, mesh);
    for (size_t s = 0; s < losses.size(); ++s)  // the same windows (a split batch sums apart)
      EXPECT_NEAR(sharded[s], losses[s], 1e-5 * (1 + losses[s])) << mesh << " step " << s;
  }
  json other = config;
  other["seed"] = 8;
  EXPECT_NE(random_crop_losses(other, x, target, ""), losses);
  // Inference: the central window of ratio 3:2 (6x4 of 6x5, columns 0-3),
  // resized to 3x2: bilinear halving is the mean of each 2x2 block.
  const Tensor got = predict(from_table("RandomCrop", config), x, "data=2,model=2");
  ASSERT_EQ(got.shape(), (Shape{2, 3, 2, 1}));
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        double mean = 0;
        for (int64_t di = 0; di < 2; ++di)
          for (int64_t dj = 0; dj < 2; ++dj)
            mean += x.f32()[(b * 6 + 2 * i + di) * 5 + 2 * j + dj] / 4;
        EXPECT_NEAR(got.f32()[(b * 3 + i) * 2 + j], mean, 1e-5);
      }
}

// A naive resize along one axis of [b, h, w, c] (half-pixel centres), for
// the file's reference.
Tensor resize_axis(const Tensor& x, int axis, int64_t to, bool nearest) {
  Shape s = x.shape();
  const int64_t from = s[axis];
  s[axis] = to;
  Tensor out(s);
  for (int64_t b = 0; b < s[0]; ++b)
    for (int64_t i = 0; i < s[1]; ++i)
      for (int64_t j = 0; j < s[2]; ++j)
        for (int64_t c = 0; c < s[3]; ++c) {
          const int64_t o = axis == 1 ? i : j;
          auto read = [&](int64_t r) {
            const int64_t ii = axis == 1 ? r : i, jj = axis == 1 ? j : r;
            const Shape& xs = x.shape();
            return double(x.f32()[((b * xs[1] + ii) * xs[2] + jj) * xs[3] + c]);
          };
          const double scale = double(from) / double(to);
          double v;
          if (nearest) {
            v = read(std::min<int64_t>(int64_t(std::floor((o + 0.5) * scale)), from - 1));
          } else {
            const double src = (o + 0.5) * scale - 0.5, low = std::floor(src);
            const int64_t lo = std::clamp<int64_t>(int64_t(low), 0, from - 1);
            const int64_t hi = std::clamp<int64_t>(int64_t(low) + 1, 0, from - 1);
            v = (1 - (src - low)) * read(lo) + (src - low) * read(hi);
          }
          out.f32()[((b * s[1] + i) * s[2] + j) * s[3] + c] = static_cast<float>(v);
        }
  return out;
}

Tensor dense_of(const Tensor& x, const Tensor& kernel, const Tensor& bias) {
  const int64_t rows = x.shape()[0], in = kernel.shape()[0], out = kernel.shape()[1];
  Tensor y({rows, out});
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double sum = bias.f32()[o];
      for (int64_t i = 0; i < in; ++i) sum += x.f32()[r * in + i] * kernel.f32()[i * out + o];
      y.f32()[r * out + o] = static_cast<float>(sum);
    }
  return y;
}

Tensor predict_file(const std::string& file, const Tensor& x, const std::string& mesh) {
  KerasModel k = load_keras_model(file);
  if (!mesh.empty())
    k.model->set_distribution(std::make_shared<AutoShard>(DeviceMesh::parse(mesh), "data",
                                                          AutoShardOptions{.time_limit_s = 0.1}));
  return k.model->predict(x);
}

// keras3_resizing.keras: RandomCrop(6, 6) in inference keeps the central
// 6x6 of 7x6 (rows 0-5); then cropped to its central 6x4 (ratio 5:4) and
// resized to 5x4 (bilinear), padded with a column of 0.5 on each side to
// 5x6 (ratio 6:9) and resized to 6x9 (nearest), then Flatten and Dense.
TEST(KerasPreprocessing, ResizingFilePredictsAsKeras) {
  const std::string file = kKerasFileFixtures + "/families/keras3_resizing.keras";
  const Tensor x = random_tensor({4, 7, 6, 3}, 11);
  KerasModel one = load_keras_model(file);
  Tensor h = pad_image(pad_image(x, 0, -1, 0, 0, 0), 0, 0, -1, -1, 0);
  h = resize_axis(resize_axis(h, 1, 5, false), 2, 4, false);
  h = resize_axis(resize_axis(pad_image(h, 0, 0, 1, 1, 0.5f), 1, 6, true), 2, 9, true);
  const Tensor want = dense_of(h.reshaped({4, 162}), one.model->gather_weight("dense.kernel"),
                               one.model->gather_weight("dense.bias"));
  for (const char* mesh : kMeshes)
    EXPECT_LT(max_relative_error(predict_file(file, x, mesh), want), 1e-5) << mesh;
}

// keras3_categories.keras: Discretization([-0.5, 0, 0.5]) of 3 features,
// its buckets counted by CategoryEncoding(4, count), then Dense.
TEST(KerasPreprocessing, CategoriesFilePredictsAsKeras) {
  const std::string file = kKerasFileFixtures + "/families/keras3_categories.keras";
  const Tensor x = random_tensor({6, 3}, 12);
  KerasModel one = load_keras_model(file);
  Tensor hist({6, 4});
  std::fill_n(hist.f32(), hist.numel(), 0.0f);
  for (int64_t e = 0; e < x.numel(); ++e)
    hist.f32()[(e / 3) * 4 + int64_t(digitize(x.f32()[e], {-0.5, 0.0, 0.5}))] += 1;
  const Tensor want = dense_of(hist, one.model->gather_weight("dense.kernel"),
                               one.model->gather_weight("dense.bias"));
  for (const char* mesh : kMeshes)
    EXPECT_LT(max_relative_error(predict_file(file, x, mesh), want), 1e-5) << mesh;
}

// keras2_category_ids.h5: tf-keras's int32 ids [batch, 1] one-hot encoded
// (5 tokens) into a Dense: each prediction is the kernel's row of its id.
TEST(KerasPreprocessing, CategoryIdsH5PredictsAsKeras) {
  const std::string file = kKerasFileFixtures + "/families/keras2_category_ids.h5";
  const Tensor ids = Tensor::from_ints({5, 1}, {4, 0, 2, 2, 1});
  KerasModel one = load_keras_model(file);
  const Tensor kernel = one.model->gather_weight("dense.kernel");
  const Tensor bias = one.model->gather_weight("dense.bias");
  Tensor want({5, 2});
  for (int64_t r = 0; r < 5; ++r)
    for (int64_t o = 0; o < 2; ++o)
      want.f32()[r * 2 + o] = kernel.f32()[ids.i32()[r] * 2 + o] + bias.f32()[o];
  for (const char* mesh : kMeshes)
    EXPECT_LT(max_relative_error(predict_file(file, ids, mesh), want), 1e-6) << mesh;
}

}  // namespace keras_preprocessing_test
}  // namespace autoshard
