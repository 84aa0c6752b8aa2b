// libFuzzer target for NumPy files: any bytes, read as an .npy (parse_npy)
// and as a file told apart by its magic (read_arrays: an .npy, or an .npz
// through libzip), must give arrays whose every element was checked, or an
// autoshard::Error; never a crash, a hang, an out-of-bounds read or an
// allocation the file's size does not justify (ASan + UBSan, -rss_limit_mb).
// What was read is written back and must read back the same.
//
//   scripts/fuzz.sh [SECONDS]
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "autoshard/error.h"
#include "autoshard/io/npy.h"

namespace {
void round_trip(const autoshard::Tensor& t) {
  const autoshard::NpyArray back = autoshard::parse_npy(autoshard::npy_bytes(t), "round trip");
  if (back.tensor.shape() != t.shape() || std::memcmp(back.tensor.raw(), t.raw(), t.nbytes()) != 0)
    __builtin_trap();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    round_trip(autoshard::parse_npy({reinterpret_cast<const char*>(data), size}, "fuzz").tensor);
  } catch (const autoshard::Error&) {
  }
  const int fd = memfd_create("npy_fuzz", 0);
  if (fd < 0) return 0;
  if (size > 0 && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return 0;
  }
  try {
    for (const auto& [name, array] :
         autoshard::read_arrays("/proc/self/fd/" + std::to_string(fd), "fuzz"))
      round_trip(array.tensor);
  } catch (const autoshard::Error&) {
  }
  close(fd);
  return 0;
}
