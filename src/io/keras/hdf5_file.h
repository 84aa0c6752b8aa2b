// HDF5 files (Debian's libhdf5, C API) as the Keras readers need them:
// groups, string attributes, and blocks of datasets read as hyperslabs, so
// each device reads only its own share. A file inside a zip archive is read
// in place through a small read-only virtual file driver over a ReadAt.
// libhdf5 (serial build) is not thread-safe: every call holds one lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "autoshard/tensor/tensor.h"
#include "io/keras/zip_archive.h"

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
  // Opens `path` read-only; `what` names it in errors.
  static std::shared_ptr<H5File> open(const std::string& path, const std::string& what);
  // Opens an HDF5 image read through `read` (a zip member).
  static std::shared_ptr<H5File> open(ZipMember member, const std::string& what);
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
  int64_t id_;
  std::string what_;
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
