// The safetensors reader and writer: round trips, dtype conversion, and a
// clear error naming the tensor for each kind of malformed file.
#include "autoshard/io/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "autoshard/error.h"
#include "test_util.h"

namespace autoshard {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("autoshard_st_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// Writes a file with a hand-made header and data section.
std::string raw_file(const std::string& name, const std::string& header, const std::string& data) {
  std::string path = temp_path(name);
  std::ofstream out(path, std::ios::binary);
  uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << data;
  return path;
}

void expect_error(const std::string& path, const std::string& needle) {
  try {
    SafetensorsFile f(path);
    for (const auto& e : f.entries()) f.load(e.name);
    ADD_FAILURE() << "no error for " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
  fs::remove(path);
}

TEST(Safetensors, RoundTripWithMetadata) {
  const std::string path = temp_path("rt.safetensors");
  Tensor a = testing::random_tensor({3, 4}, 1);
  Tensor b = Tensor::from_ints({2}, {7, -9});
  save_safetensors(path, {{"a", a}, {"b", b}}, {{"note", "hi"}});
  SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("note"), "hi");
  EXPECT_EQ(max_abs_diff(f.load("a"), a), 0.0);
  EXPECT_EQ(f.load("b").i32()[1], -9);
  fs::remove(path);
}

TEST(Safetensors, ConvertsHalfBfloatAndInt64) {
  // 1.5 in F16 is 0x3E00; in BF16 0x3FC0. -2 as I64.
  std::string data;
  const uint16_t h = 0x3E00, bf = 0x3FC0;
  const int64_t i = -2;
  data.append(reinterpret_cast<const char*>(&h), 2);
  data.append(reinterpret_cast<const char*>(&bf), 2);
  data.append(reinterpret_cast<const char*>(&i), 8);
  std::string path = raw_file("conv.safetensors",
                              R"({"h":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
                              R"("b":{"dtype":"BF16","shape":[1],"data_offsets":[2,4]},)"
                              R"("i":{"dtype":"I64","shape":[1],"data_offsets":[4,12]}})",
                              data);
  SafetensorsFile f(path);
  EXPECT_EQ(f.load("h").item(), 1.5f);
  EXPECT_EQ(f.load("b").item(), 1.5f);
  EXPECT_EQ(f.load("i").i32()[0], -2);
  fs::remove(path);
}

TEST(Safetensors, MalformedFilesNameTheProblem) {
  const std::string f4(16, '\0');
  expect_error(raw_file("a", "{not json", f4), "not valid JSON");
  expect_error(raw_file("b", R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,64]}})", f4),
               "tensor 'w': data_offsets [0, 64) fall outside");
  expect_error(raw_file("c", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}})", f4),
               "tensor 'w': holds 16 bytes but shape and dtype need 12");
  expect_error(raw_file("d", R"({"w":{"dtype":"Q4","shape":[4],"data_offsets":[0,16]}})", f4),
               "tensor 'w': unknown dtype 'Q4'");
  expect_error(raw_file("e",
                        R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                        f4),
               "overlap");
  expect_error(raw_file("f",
                        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                        R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                        f4),
               "tensor 'w' appears twice");
  expect_error(raw_file("g", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", f4),
               "non-negative integers");
  // Sizes that would wrap 64-bit byte counts: 2^62 F64 elements, and a shape
  // whose element count overflows on its own.
  expect_error(
      raw_file("w", R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})",
               f4),
      "more than 2^60 elements");
  expect_error(
      raw_file("x", R"({"w":{"dtype":"F64","shape":[1152921504606846976],"data_offsets":[0,0]}})",
               f4),
      "more than 2^62 bytes");
  expect_error(
      raw_file("y",
               R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})",
               f4),
      "more than 2^60 elements");
  // A header length larger than the file.
  std::string path = temp_path("h");
  std::ofstream(path, std::ios::binary) << std::string("\xff\xff\xff\x00\x00\x00\x00\x00{}", 10);
  expect_error(path, "header length");
  expect_error(temp_path("missing"), "cannot be read");
}

}  // namespace
}  // namespace autoshard

namespace autoshard {
namespace {

// Every 16-bit pattern survives float and back (NaNs stay NaNs), and floats
// between two neighbours round to the nearer, ties to the even one.
TEST(HalfPrecision, RoundTripsAndRoundsToNearestEven) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    const float f = half_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    } else {
      EXPECT_EQ(float_to_half(f), bits) << h;
    }
    uint32_t wide = h << 16;
    float g;
    std::memcpy(&g, &wide, 4);
    if (!std::isnan(g)) {
      EXPECT_EQ(float_to_bf16(g), bits) << h;
    }
  }
  // 1 + 2^-11 lies halfway between 1 and the next half (1 + 2^-10): to 1
  // (even); 1 + 3 * 2^-11 halfway between odd and even: up to 1 + 2^-9.
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);  // past halfway: up
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds past the largest half: infinity
  EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);         // half the smallest subnormal: to 0
  EXPECT_EQ(float_to_half(0x1p-25f * 1.5f), 0x0001);  // past it: the smallest subnormal
  EXPECT_EQ(float_to_half(-0x1p-24f * 3), 0x8003);    // a subnormal, exactly
  EXPECT_EQ(float_to_bf16(1.0f + 0x1p-8f), 0x3f80);   // halfway: to even
  EXPECT_EQ(float_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7f80);  // past bf16's largest: infinity
}

}  // namespace
}  // namespace autoshard
