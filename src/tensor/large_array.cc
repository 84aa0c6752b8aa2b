#include "tensor/large_array.h"

#include <cstdint>
#include <algorithm>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace autoshard {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr std::align_val_t kAlign{64};

#if defined(__linux__) && !defined(AUTOSHARD_SANITIZED)
constexpr bool kMapLarge = true;

size_t page_rounded(size_t bytes) {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Over-mapped by a huge page, then the unaligned head and the tail unmapped.
void* map_aligned(size_t bytes) {
  const size_t length = page_rounded(bytes), mapped = length + kHugePage;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto start = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (start + kHugePage - 1) & ~uintptr_t(kHugePage - 1);
  if (aligned > start) munmap(raw, aligned - start);
  if (const size_t tail = start + mapped - (aligned + length); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + length), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, length, MADV_HUGEPAGE);  // a hint: without huge pages it is ordinary memory
  return p;
}
void unmap(void* p, size_t bytes) {
  munmap(p, page_rounded(bytes));
}
#else
constexpr bool kMapLarge = false;
void* map_aligned(size_t) {
  return nullptr;
}
void unmap(void*, size_t) {}
#endif

bool mapped(size_t bytes) {
  return kMapLarge && bytes >= kHugePage;
}

}  // namespace

void* allocate_array(size_t bytes) {
  if (mapped(bytes)) return map_aligned(bytes);
  const size_t padded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
  void* p = ::operator new(padded, kAlign, std::nothrow);
  if (p) std::memset(p, 0, padded);
  return p;
}

void free_array(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (mapped(bytes))
    unmap(p, bytes);
  else
    ::operator delete(p, kAlign);
}

}  // namespace autoshard
