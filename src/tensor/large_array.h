// Storage for large arrays: weights, optimizer state, activations, the
// executor's buffers and the compact copies that decoding reads. Kernels
// stream these whole, and a core's hardware prefetchers stop at every page
// boundary: on 4 KiB pages one core read a large array at 19-24 GB/s on a
// 2-core AMD EPYC (Zen 4) VM, on 2 MiB pages at 31 (two cores: 30-32
// against 34; llama-124m's f32 decoding went from 73% to 92% of the copy
// bandwidth). So an array of at least one huge page gets a mapping of its
// own, aligned to 2 MiB and marked for transparent huge pages (madvise is
// the kernel's default policy), which a fresh mapping hands out zero-filled.
// Smaller arrays come from the heap, and so does every array of a sanitizer
// build (AddressSanitizer checks heap blocks, not mappings).
#pragma once

#include <cstddef>
#include <new>

namespace autoshard {

// `bytes` of zero-filled memory, 64-byte aligned (2 MiB for a large array);
// null when the system has none to give.
void* allocate_array(size_t bytes);
// Frees what allocate_array(bytes) returned.
void free_array(void* p, size_t bytes);

// A std::vector's allocator on allocate_array (elements are value-initialised
// by the vector itself as usual).
template <typename T>
struct LargeArrayAllocator {
  using value_type = T;
  LargeArrayAllocator() = default;
  template <typename U>
  LargeArrayAllocator(const LargeArrayAllocator<U>&) {}
  T* allocate(size_t n) {
    if (void* p = allocate_array(n * sizeof(T))) return static_cast<T*>(p);
    throw std::bad_alloc();
  }
  void deallocate(T* p, size_t n) { free_array(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const LargeArrayAllocator<U>&) const {
    return true;
  }
};

}  // namespace autoshard
