// Shared by the Keras reader fuzz targets: a fuzz input as a ZipMember or a
// file, and a bounded walk over an HDF5 file reading every small dataset.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "autoshard/error.h"
#include "io/keras/hdf5_file.h"
#include "io/zip_archive.h"

namespace keras_fuzz {

// The input bytes as an in-memory member (copied: libFuzzer's buffer is
// only valid during the call, as is this member).
inline autoshard::ZipMember member_of(const uint8_t* data, size_t size) {
  auto bytes = std::make_shared<std::string>(reinterpret_cast<const char*>(data), size);
  autoshard::ZipMember m;
  m.size = size;
  m.read = [bytes](uint64_t offset, uint64_t n, void* dst) {
    AS_CHECK(offset <= bytes->size() && n <= bytes->size() - offset, "fuzz: read past the end");
    std::memcpy(dst, bytes->data() + offset, n);
  };
  return m;
}

// The input as a regular file (an in-memory one) named by a path.
struct MemFile {
  int fd = -1;
  std::string path;
  MemFile(const uint8_t* data, size_t size) {
    fd = ::memfd_create("keras_fuzz", 0);
    if (fd < 0) __builtin_trap();
    if (size && ::write(fd, data, size) != static_cast<ssize_t>(size)) __builtin_trap();
    path = "/proc/self/fd/" + std::to_string(fd);
  }
  ~MemFile() { ::close(fd); }
};

// Every group and dataset (at most 256 objects, 8 levels); datasets of at
// most 64k elements are read whole.
inline void walk(const autoshard::keras::H5File& h5, const std::string& group, int depth,
                 int& budget) {
  if (depth > 8) return;
  for (const std::string& name : h5.children(group)) {
    if (--budget < 0) return;
    const std::string path = group.empty() ? name : group + "/" + name;
    h5.strings_attribute(path, "weight_names");
    if (h5.is_group(path)) {
      walk(h5, path, depth + 1, budget);
    } else if (h5.is_dataset(path)) {
      const autoshard::keras::H5Dataset d = h5.dataset(path);
      int64_t n = 1;
      bool small = true;
      for (int64_t dim : d.shape) {
        if (dim < 0 || dim > (1 << 16) || n * dim > (1 << 16)) small = false;
        if (small) n *= dim;
      }
      if (!small || !d.floating) continue;
      std::vector<float> values(static_cast<size_t>(n));
      h5.read_block(path, std::vector<int64_t>(d.shape.size(), 0), d.shape, values.data());
    }
  }
}

}  // namespace keras_fuzz
