// Storage for large arrays (tensor/large_array.h): every size comes back
// zero-filled and 64-byte aligned, large ones 2 MiB-aligned in a mapping of
// their own that the kernel may back with huge pages; a std::vector on the
// allocator grows and frees like any other; tensors take their storage
// from it.
#include "tensor/large_array.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;

bool huge_pages_mapped() {
#if defined(__linux__) && !defined(AUTOSHARD_SANITIZED)
  return true;
#else
  return false;
#endif
}

TEST(LargeArray, EverySizeIsZeroFilledAlignedAndWritable) {
  for (size_t bytes : {size_t{1}, size_t{63}, size_t{4096}, kHugePage - 1, kHugePage,
                       5 * kHugePage + 3}) {
    auto* p = static_cast<unsigned char*>(allocate_array(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << bytes;
    if (huge_pages_mapped() && bytes >= kHugePage) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kHugePage, 0u) << bytes;
    }
    size_t nonzero = 0;
    for (size_t i = 0; i < bytes; ++i) nonzero += p[i] != 0;
    EXPECT_EQ(nonzero, 0u) << bytes;
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(i);  // the last byte too
    EXPECT_EQ(p[bytes - 1], static_cast<unsigned char>(bytes - 1));
    free_array(p, bytes);
  }
}

// The /proc/self/smaps entry of the mapping holding `p`: its lines up to the
// next mapping's header.
std::string smaps_entry(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line, entry;
  bool inside = false;
  const auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(in, line)) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream header(line);
    if (header >> std::hex >> lo >> dash >> hi && dash == '-') {
      if (inside) break;
      inside = lo <= at && at < hi;
    }
    if (inside) entry += line + "\n";
  }
  return entry;
}

std::string transparent_huge_pages() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string policy;
  std::getline(in, policy);
  return policy;
}

// Where the kernel allows huge pages at all, a large array's mapping is
// marked for them (THPeligible), whatever the system's default policy.
TEST(LargeArray, LargeArraysAreEligibleForHugePages) {
  const std::string policy = transparent_huge_pages();
  if (!huge_pages_mapped() || policy.empty() || policy.find("[never]") != std::string::npos)
    GTEST_SKIP() << "no transparent huge pages here (" << policy << ")";
  const size_t bytes = 4 * kHugePage;
  void* p = allocate_array(bytes);
  ASSERT_NE(p, nullptr);
  const std::string entry = smaps_entry(p);
  free_array(p, bytes);
  const size_t at = entry.find("THPeligible:");
  if (at == std::string::npos) GTEST_SKIP() << "this kernel's smaps does not say";
  int eligible = -1;
  std::istringstream(entry.substr(at + 12)) >> eligible;
  EXPECT_EQ(eligible, 1) << entry;
}

TEST(LargeArray, VectorsGrowAndTensorsUseIt) {
  std::vector<int8_t, LargeArrayAllocator<int8_t>> codes;
  for (size_t i = 0; i < 3 * kHugePage; ++i) codes.push_back(static_cast<int8_t>(i % 101));
  size_t wrong = 0;
  for (size_t i = 0; i < codes.size(); ++i) wrong += codes[i] != static_cast<int8_t>(i % 101);
  EXPECT_EQ(wrong, 0u);
  codes.resize(5 * kHugePage);
  EXPECT_EQ(codes.back(), 0);  // value-initialised

  const Tensor t({int64_t(kHugePage)});  // 8 MiB of f32
  if (huge_pages_mapped()) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.f32()) % kHugePage, 0u);
  }
  size_t nonzero = 0;
  for (int64_t i = 0; i < t.numel(); ++i) nonzero += t.f32()[i] != 0.0f;
  EXPECT_EQ(nonzero, 0u);
}

}  // namespace
}  // namespace autoshard
