// libFuzzer target for the safetensors reader: any bytes must give either a
// validated file whose every tensor loads, or an autoshard::Error; never a
// crash, a hang, or an out-of-bounds read (built with ASan + UBSan).
//
//   scripts/fuzz.sh [SECONDS]
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/safetensors.h"
#include "autoshard/io/tensor_mapping.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int fd = memfd_create("safetensors_fuzz", 0);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  try {
    autoshard::SafetensorsFile file(path);
    for (const autoshard::SafetensorsEntry& e : file.entries()) {
      try {
        autoshard::Tensor t = file.load(e.name);
        (void)t;
      } catch (const autoshard::Error&) {
        // dtypes that do not load as f32/i32 (U8, BOOL, ...) are reported, not read
      }
      // The sharded path: one device's block of the tensor split over two.
      try {
        const autoshard::TensorMapping m = autoshard::TensorMapping::plain(e.name);
        autoshard::check_mapping(file, m, e.shape, e.name);
        autoshard::Sharding s = autoshard::Sharding::replicated(static_cast<int>(e.shape.size()));
        if (!e.shape.empty()) s.dims[0] = 0;
        autoshard::Tensor block = autoshard::read_block(file, m, e.shape, s,
                                                        autoshard::DeviceMesh({2}, {"x"}), 1);
        (void)block;
      } catch (const autoshard::Error&) {
      }
    }
  } catch (const autoshard::Error&) {
  }
  close(fd);
  return 0;
}
