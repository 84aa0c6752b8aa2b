// NumPy files: arrays NumPy saved (tests/data/npy/, tools/make_npy_fixtures.py)
// read with their values, what autoshard writes read back, and bad files
// refused with one error naming the file.
#include "autoshard/io/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "test_util.h"

namespace autoshard {
namespace {

using testing::error_of;

const std::string kNpyDir = std::string(AUTOSHARD_TEST_DATA) + "/npy/";

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file of `bytes` in a fresh temporary directory, removed with the object.
struct TempFile {
  explicit TempFile(const std::string& bytes, const std::string& name = "a.npz") {
    dir = std::filesystem::temp_directory_path() /
          ("npy_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(dir);
    path = (dir / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
  }
  ~TempFile() { std::filesystem::remove_all(dir); }
  std::filesystem::path dir;
  std::string path;
  static inline int counter = 0;
};

TEST(Npy, ReadsEveryDtypeNumPySaves) {
  const std::pair<const char*, NpyType> cases[] = {
      {"float16", NpyType::Float16}, {"float32", NpyType::Float32}, {"float64", NpyType::Float64},
      {"int8", NpyType::Int8},       {"int16", NpyType::Int16},     {"int32", NpyType::Int32},
      {"int64", NpyType::Int64},     {"uint8", NpyType::UInt8},     {"uint16", NpyType::UInt16}};
  for (const auto& [name, type] : cases) {
    SCOPED_TRACE(name);
    const NpyArray a = read_npy(kNpyDir + name + ".npy", "--x");
    EXPECT_EQ(a.stored, type);
    EXPECT_STREQ(npy_type_name(a.stored), name);
    if (type == NpyType::UInt16) {  // [1, 2]
      ASSERT_EQ(a.tensor.shape(), Shape({2}));
      EXPECT_EQ(a.tensor.i32()[1], 2);
      continue;
    }
    ASSERT_EQ(a.tensor.shape(), Shape({2, 3}));
    const int offset = type == NpyType::UInt8 ? 0 : -3;
    for (int i = 0; i < 6; ++i) {
      if (npy_is_floating(type))
        EXPECT_EQ(a.tensor.f32()[i], float(i + offset));
      else
        EXPECT_EQ(a.tensor.i32()[i], i + offset);
    }
  }
}

TEST(Npy, ReadsBoolsBigEndianVersion2ScalarsAndEmptyArrays) {
  const NpyArray b = read_npy(kNpyDir + "bool.npy", "--y");
  EXPECT_EQ(b.stored, NpyType::Bool);
  EXPECT_EQ(std::vector<int32_t>(b.tensor.i32(), b.tensor.i32() + 6),
            std::vector<int32_t>({1, 0, 1, 0, 0, 1}));
  const NpyArray f = read_npy(kNpyDir + "big_endian_f4.npy", "--x");
  const NpyArray i = read_npy(kNpyDir + "big_endian_i8.npy", "--x");
  const NpyArray v2 = read_npy(kNpyDir + "version2.npy", "--x");
  for (int k = 0; k < 6; ++k) {
    EXPECT_EQ(f.tensor.f32()[k], float(k - 3));
    EXPECT_EQ(i.tensor.i32()[k], k - 3);
    EXPECT_EQ(v2.tensor.f32()[k], float(k - 3));
  }
  const NpyArray s = read_npy(kNpyDir + "scalar.npy", "--x");
  EXPECT_EQ(s.tensor.shape(), Shape{});
  EXPECT_EQ(s.tensor.f32()[0], 2.5f);
  EXPECT_EQ(read_npy(kNpyDir + "empty.npy", "--x").tensor.shape(), Shape({0, 4}));
}

TEST(Npy, ReadsNpzStoredAndCompressed) {
  for (const char* name : {"two.npz", "two_compressed.npz"}) {
    SCOPED_TRACE(name);
    const auto arrays = read_arrays(kNpyDir + name, "--x");
    ASSERT_EQ(arrays.size(), 2u);
    const NpyArray& image = arrays.at("image");
    EXPECT_EQ(image.tensor.shape(), Shape({3, 2, 2}));
    EXPECT_EQ(image.tensor.f32()[11], 8.0f);
    const NpyArray& label = arrays.at("label");
    EXPECT_EQ(label.stored, NpyType::Int64);
    EXPECT_EQ(std::vector<int32_t>(label.tensor.i32(), label.tensor.i32() + 3),
              std::vector<int32_t>({0, 2, 1}));
  }
  const auto one = read_arrays(kNpyDir + "float32.npy", "--x");
  ASSERT_EQ(one.size(), 1u);
  EXPECT_TRUE(one.contains(""));
}

TEST(Npy, WritesWhatNumPyAndThisReaderRead) {
  Tensor f = Tensor::from({2, 2}, {1.5f, -2.0f, 0.25f, 1e30f});
  Tensor i = Tensor::from_ints({3}, {7, -1, 2147483647});
  const std::string bytes = npy_bytes(f);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ((bytes.size() - f.nbytes()) % 64, 0u);  // data 64-byte aligned, as NumPy does
  const NpyArray back = parse_npy(bytes, "test");
  EXPECT_EQ(back.tensor.shape(), f.shape());
  EXPECT_EQ(std::memcmp(back.tensor.raw(), f.raw(), f.nbytes()), 0);
  TempFile npz(npz_bytes({{"logits", f}, {"ids", i}}));
  const auto arrays = read_npz(npz.path, "--out");
  ASSERT_EQ(arrays.size(), 2u);
  EXPECT_EQ(arrays.at("ids").stored, NpyType::Int32);
  EXPECT_EQ(arrays.at("ids").tensor.i32()[2], 2147483647);
  EXPECT_EQ(arrays.at("logits").tensor.f32()[3], 1e30f);
  const NpyArray scalar = parse_npy(npy_bytes(Tensor::scalar(3)), "test");
  EXPECT_EQ(scalar.tensor.shape(), Shape{});
}

TEST(Npy, ConvertsForTheModelsInputs) {
  const NpyArray ids = read_npy(kNpyDir + "float32.npy", "--x");
  const Tensor as_ints = npy_as(ids, DType::I32, "--x");
  EXPECT_EQ(as_ints.i32()[5], 2);
  const NpyArray ints = read_npy(kNpyDir + "int64.npy", "--x");
  EXPECT_EQ(npy_as(ints, DType::F32, "--x").f32()[0], -3.0f);
  const NpyArray halves = parse_npy(npy_bytes(Tensor::from({2}, {1.0f, 1.5f})), "t");
  EXPECT_NE(error_of([&] {
              npy_as(halves, DType::I32, "--x 'x.npy'");
            }).find("element [1] is 1.5 where whole numbers"),
            std::string::npos);
}

TEST(Npy, RefusesWhatItCannotHoldWithOneErrorNamingTheFile) {
  const std::pair<const char*, const char*> cases[] = {
      {"fortran.npy", "Fortran order"},
      {"int64_overflow.npy", "element [1] is 1099511627776, beyond int32's range"},
      {"nan.npy", "element [1] is NaN"},
      {"float64_overflow.npy", "beyond float32's range"},
      {"complex.npy", "dtype '<c8' is not supported"},
      {"object.npy", "object array (pickled Python objects) is never read"}};
  for (const auto& [name, expected] : cases) {
    SCOPED_TRACE(name);
    const std::string message = error_of([&] { read_arrays(kNpyDir + name, "--x"); });
    EXPECT_NE(message.find(std::string("--x '") + kNpyDir + name + "'"), std::string::npos)
        << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST(Npy, RefusesMalformedFiles) {
  const std::string good = file_bytes(kNpyDir + "float32.npy");
  auto header_with = [&](const std::string& dict) {
    std::string h = std::string("\x93NUMPY\x01\x00", 8);
    h += static_cast<char>(dict.size()), h += '\0';
    return h + dict;
  };
  const std::pair<std::string, const char*> cases[] = {
      {good.substr(0, 60), "does not fit the file"},
      {good.substr(0, good.size() - 1), "needs 24 bytes of data but the file holds 23"},
      {good + "x", "needs 24 bytes of data but the file holds 25"},
      {"PK" + good, "not an .npy file"},
      {std::string("\x93NUMPY\x07\x00", 8) + good.substr(8), "version 7"},
      {header_with("{'descr': '<f4', 'shape': (1,), }"), "lacks one of"},
      {header_with("{'descr': '<f4', 'descr': '<f4', }"), "key 'descr' twice"},
      {header_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"), "key 'x'"},
      {header_with("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
       "not a tuple of whole numbers"},
      {header_with("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }"),
       "too large"},
      {header_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1152921504606846976,), }"),
       ""},
      {header_with("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }"),
       "structured arrays"},
      {header_with("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (1,), }"),
       "neither True nor False"},
      {header_with("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), } junk"),
       "bytes after its dict"}};
  for (const auto& [bytes, expected] : cases) {
    SCOPED_TRACE(expected);
    const std::string message = error_of([&] { parse_npy(bytes, "--x 'bad.npy'"); });
    EXPECT_NE(message.find("--x 'bad.npy'"), std::string::npos) << message;
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
  EXPECT_NE(error_of([&] { read_arrays(kNpyDir, "--x"); }).find("is a directory"),
            std::string::npos);
  TempFile text("hello there");
  EXPECT_NE(error_of([&] { read_arrays(text.path, "--x"); }).find("neither an .npy nor an .npz"),
            std::string::npos);
}

// Patches the uncompressed size of the first entry in both of the zip's
// headers (local at 22, central at 24 bytes past their signatures).
std::string with_declared_size(std::string zip, uint32_t size) {
  const std::pair<const char*, size_t> headers[] = {{"PK\x03\x04", 22}, {"PK\x01\x02", 24}};
  for (const auto& [signature, offset] : headers) {
    const size_t at = zip.find(signature);
    EXPECT_NE(at, std::string::npos);
    std::memcpy(zip.data() + at + offset, &size, 4);
  }
  return zip;
}

TEST(Npy, RefusesZipsWhoseSizesLie) {
  const std::string stored = file_bytes(kNpyDir + "two.npz");
  const std::string compressed = file_bytes(kNpyDir + "two_compressed.npz");
  TempFile too_big(with_declared_size(stored, 1u << 30));
  TempFile bomb(with_declared_size(compressed, 0xfffffff0u));
  TempFile too_small(with_declared_size(compressed, 100));
  TempFile cut(compressed.substr(0, compressed.size() / 2));
  TempFile other(npz_bytes({{"x", Tensor::scalar(1)}}).replace(0, 0, ""), "other.npz");
  for (const TempFile* f : {&too_big, &bomb, &too_small, &cut}) {
    const std::string message = error_of([&] { read_arrays(f->path, "--x"); });
    EXPECT_NE(message.find("--x '" + f->path + "'"), std::string::npos) << message;
  }
  EXPECT_EQ(error_of([&] { read_arrays(other.path, "--x"); }), "");
}

}  // namespace
}  // namespace autoshard
