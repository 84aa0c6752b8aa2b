// Each device reads only its own share of a Keras 3 `.keras` file's
// weights: bytes read from the zip member are counted while every device
// of model=4 reads its block of a Dense kernel (split by columns and by
// rows), and a `.keras` whose members are deflated loads like a stored one.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zip.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "autoshard/io/keras_model.h"
#include "autoshard/plan/distribution.h"
#include "io/keras/hdf5_file.h"
#include "io/keras/weight_table.h"
#include "io/zip_archive.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace keras;

constexpr int64_t kIn = 256, kOut = 1024;  // a 1 MiB kernel

// A Keras 3 layer entry of a Functional config.json, called on `from`.
json layer_entry(const std::string& cls, const std::string& name, json config,
                 const std::string& from) {
  config["name"] = name;
  json layer = {
      {"module", "keras.layers"},   {"class_name", cls}, {"config", config},
      {"registered_name", nullptr}, {"name", name},      {"inbound_nodes", json::array()}};
  if (!from.empty())
    layer["inbound_nodes"].push_back(
        {{"args",
          {{{"class_name", "__keras_tensor__"},
            {"config",
             {{"shape", nullptr}, {"dtype", "float32"}, {"keras_history", {from, 0, 0}}}}}}},
         {"kwargs", json::object()}});
  return layer;
}

// A directory removed at the end of a test.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Tensor kernel_values() {
  Tensor k({kIn, kOut});
  for (int64_t i = 0; i < k.numel(); ++i) k.f32()[i] = static_cast<float>(i % 1000) * 1e-3f;
  return k;
}

// x (kIn) -> Dense "dense" (kOut, no bias), as Keras 3's saving_lib lays it
// out; members deflated when `deflate`.
std::string write_keras(const fs::path& parent, bool deflate) {
  const fs::path dir = parent / (deflate ? "deflated" : "stored");
  fs::create_directories(dir);
  const json config = {
      {"module", "keras"},
      {"class_name", "Functional"},
      {"config",
       {{"name", "one_dense"},
        {"layers",
         {layer_entry("InputLayer", "x", {{"batch_shape", {nullptr, kIn}}, {"dtype", "float32"}},
                      ""),
          layer_entry("Dense", "dense", {{"units", kOut}, {"use_bias", false}}, "x")}},
        {"input_layers", {{"x", 0, 0}}},
        {"output_layers", {{"dense", 0, 0}}}}},
      {"registered_name", "Functional"}};
  std::ofstream(dir / "config.json") << config.dump();
  std::ofstream(dir / "metadata.json") << R"({"keras_version": "3.6.0"})";
  {
    H5Writer h5((dir / "model.weights.h5").string());
    h5.group("vars");
    h5.dataset("layers/dense/vars/0", kernel_values());
    h5.close();
  }
  const std::string out = (dir / (deflate ? "deflated.keras" : "stored.keras")).string();
  int code = 0;
  zip_t* z = zip_open(out.c_str(), ZIP_CREATE | ZIP_EXCL, &code);
  EXPECT_NE(z, nullptr);
  for (const char* member : {"metadata.json", "config.json", "model.weights.h5"}) {
    zip_source_t* src = zip_source_file(z, (dir / member).c_str(), 0, -1);
    const zip_int64_t at = zip_file_add(z, member, src, ZIP_FL_ENC_UTF_8);
    EXPECT_GE(at, 0);
    zip_set_file_compression(z, static_cast<zip_uint64_t>(at),
                             deflate ? ZIP_CM_DEFLATE : ZIP_CM_STORE, 1);
  }
  EXPECT_EQ(zip_close(z), 0);
  return out;
}

// Reading model=4's blocks of the stored kernel reads, per device, its
// quarter of the kernel and little more (HDF5's metadata), whether the
// blocks are columns (strided in the file) or rows (contiguous).
TEST(KerasShares, EachDeviceReadsItsShare) {
  TempDir dir("keras_shares");
  const std::string file = write_keras(dir.path, /*deflate=*/false);
  ZipArchive zip(file);
  ZipMember member = zip.open_member("model.weights.h5");
  auto bytes = std::make_shared<std::atomic<uint64_t>>(0);
  const ReadAt inner = member.read;
  member.read = [inner, bytes](uint64_t offset, uint64_t n, void* dst) {
    *bytes += n;
    inner(offset, n, dst);
  };
  auto h5 = H5File::open(member, "model.weights.h5");
  const WeightSource source = stored_source(h5_weight(h5, "layers/dense/vars/0"), "dense");
  const DeviceMesh mesh({4}, {"model"});
  const Tensor whole = kernel_values();
  const uint64_t share = kIn * kOut * 4 / 4;
  for (int split_dim : {1, 0}) {
    const Sharding layout =
        split_dim == 1 ? TensorLayout({std::nullopt, "model"}).to_sharding(mesh, "k", {kIn, kOut})
                       : TensorLayout({"model", std::nullopt}).to_sharding(mesh, "k", {kIn, kOut});
    for (int device = 0; device < 4; ++device) {
      const uint64_t before = *bytes;
      const Tensor block = source.read({kIn, kOut}, layout, mesh, device);
      const uint64_t read = *bytes - before;
      EXPECT_GE(read, share) << "split on dim " << split_dim << ", device " << device;
      EXPECT_LE(read, share + 16 * 1024) << "split on dim " << split_dim << ", device " << device;
      EXPECT_EQ(max_relative_error(block, block_of(whole, layout, mesh, device)), 0.0);
    }
  }
}

// Deflated members (config.json and model.weights.h5) are inflated once and
// read like stored ones: the same predictions on one device and on model=4.
TEST(KerasShares, DeflatedMembersLoad) {
  TempDir dir("keras_deflated");
  const std::string stored = write_keras(dir.path, false);
  const std::string deflated = write_keras(dir.path, true);
  Tensor x({2, kIn});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>(i % 7) - 3.0f;
  const Tensor want = load_keras_model(stored).model->predict(x);
  KerasModel k = load_keras_model(deflated);
  EXPECT_EQ(max_relative_error(k.model->predict(x), want), 0.0);
  KerasModel sharded = load_keras_model(deflated);
  LayoutMap layout;
  layout["dense.kernel"] = TensorLayout({std::nullopt, "model"});
  sharded.model->set_distribution(
      std::make_shared<ModelParallel>(DeviceMesh({4}, {"model"}), layout));
  EXPECT_LT(max_relative_error(sharded.model->predict(x), want), 1e-6);
}

}  // namespace
}  // namespace autoshard
