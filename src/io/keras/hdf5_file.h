// HDF5 files (Debian's libhdf5, C API) as the Keras readers need them:
// groups, string attributes, and blocks of datasets read as hyperslabs, so
// each device reads only its own share. A file inside a zip archive is read
// in place through a small read-only virtual file driver over a ReadAt.
// libhdf5 (serial build) is not thread-safe: every call holds one lock.
//
// A file never reads another file: external links, user-defined links,
// external storage and virtual datasets are refused by name before they
// are followed or read. libhdf5 itself crashes, hangs or allocates without
// bound on some damaged files, so open() first has a forked child read the
// whole file under memory and time limits (docs/keras-files.md, "What an
// HDF5 file may reference, and its limits").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"
#include "io/zip_archive.h"

namespace autoshard::keras {

struct H5Dataset {
  Shape shape;
  bool floating = false;  // a float type (f16, f32, f64, or bfloat16 below)
  // Keras's bfloat16: 2-byte opaque values with a "dtype" attribute "bfloat16",
  // each the top half of a float32 (read_block converts them).
  bool bfloat16 = false;
  bool integer = false;
  size_t element_bytes = 0;
};

class H5File {
 public:
  // Opens `path` (a regular file) read-only; `what` names it in errors.
  // Throws one line when the pre-flight child finds the file damaged or
  // referring outside itself.
  static std::shared_ptr<H5File> open(const std::string& path, const std::string& what);
  // Opens an HDF5 image read through `read` (a zip member), checked likewise.
  static std::shared_ptr<H5File> open(ZipMember member, const std::string& what);
  // Tests only: run in the pre-flight child before it reads the file (to
  // crash it, hang it or exhaust its memory on purpose).
  static void (*check_hook_for_tests)();
  ~H5File();
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;

  const std::string& what() const { return what_; }
  bool is_group(const std::string& path) const;
  bool is_dataset(const std::string& path) const;
  // The names of a group's members, sorted.
  std::vector<std::string> children(const std::string& group) const;
  // A string attribute (fixed or variable length) of an object, if present.
  std::optional<std::string> string_attribute(const std::string& object,
                                              const std::string& name) const;
  // A list-of-strings attribute (Keras 2's layer_names, weight_names); empty
  // when absent or empty.
  std::vector<std::string> strings_attribute(const std::string& object,
                                             const std::string& name) const;
  H5Dataset dataset(const std::string& path) const;
  // The block [offset, offset + count) of a dataset as f32 (converted from
  // its type); count's size is the dataset's rank.
  void read_block(const std::string& path, const std::vector<int64_t>& offset, const Shape& count,
                  float* dst) const;
  // A scalar integer dataset (an optimizer's iteration count).
  int64_t read_int(const std::string& path) const;

 private:
  H5File(int64_t id, std::string what);
  // Whether a dataset of type class `cls` holds Keras's bfloat16 values.
  bool is_bfloat16(const std::string& path, int cls, size_t element_bytes) const;
  // Refuses a dataset (open id `ds`) whose shape describes more than its
  // file can hold, or whose contiguous data lie outside the file.
  void check_size(int64_t ds, const std::string& path, const H5Dataset& d) const;
  // The pre-flight check: a forked child opens the file with `open` and
  // reads it all (check_all); its failure, crash, hang or runaway memory
  // throws one line naming `what`.
  static void check_in_child(const std::string& what, uint64_t file_bytes,
                             const std::function<int64_t()>& open);
  // Every object reachable from the root (bounded in depth and count, each
  // once), every attribute read as the readers read strings, every
  // dataset's shape and storage checked and its values read in blocks.
  void check_all() const;
  void check_object(const std::string& path, int depth, std::set<uint64_t>& seen,
                    int64_t& budget) const;
  void check_values(const std::string& path) const;
  int64_t id_;
  std::string what_;
  uint64_t bytes_ = 0;          // the file's size
  std::shared_ptr<void> keep_;  // the driver's registration of a ZipMember
};

// Writes HDF5 files: groups, string attributes and f32/i64 datasets.
class H5Writer {
 public:
  explicit H5Writer(const std::string& path);  // creates; fails if it exists
  ~H5Writer();
  H5Writer(const H5Writer&) = delete;
  H5Writer& operator=(const H5Writer&) = delete;
  void group(const std::string& path);  // with missing parents
  void string_attribute(const std::string& object, const std::string& name,
                        const std::string& value);
  void strings_attribute(const std::string& object, const std::string& name,
                         const std::vector<std::string>& values);
  void dataset(const std::string& path,
               const Tensor& value);  // f32 or i32 (as i64 when scalar_i64)
  void int64_scalar(const std::string& path, int64_t value);
  void close();

 private:
  int64_t id_ = -1;
  std::string path_;
};

}  // namespace autoshard::keras
