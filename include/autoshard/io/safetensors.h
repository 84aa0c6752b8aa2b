// safetensors (https://github.com/huggingface/safetensors): an 8-byte
// little-endian header length, a JSON header mapping each tensor name to
// {dtype, shape, data_offsets: [begin, end)} relative to the data section
// (plus an optional "__metadata__" string map), then the raw little-endian
// data. Opening validates the whole header; tensors are read with pread, so a
// caller can read only the byte ranges it needs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "I32", "I64", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range within the data section
};

class SafetensorsFile {
 public:
  // Throws autoshard::Error naming the file, the tensor and the problem.
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

  // The whole tensor converted to f32 (float dtypes) or i32 (integer dtypes).
  Tensor load(const std::string& name) const;
  // Reads `bytes` bytes at `offset` within the tensor's data.
  void read_bytes(const SafetensorsEntry& e, uint64_t offset, void* dst, uint64_t bytes) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// IEEE half precision to float.
float half_to_float(uint16_t h);
// bfloat16 to float: its bits are the float's top half.
float bf16_to_float(uint16_t h);
// float to IEEE half and to bfloat16, rounding to nearest even (overflow to
// infinity; NaN stays NaN).
uint16_t float_to_half(float f);
uint16_t float_to_bf16(float f);

// Bytes per element of a safetensors dtype name, or 0 if unknown.
size_t safetensors_dtype_size(const std::string& dtype);

// Writes tensors (f32 as F32, i32 as I32) atomically: to a temporary file in
// the same directory, then renamed over `path`.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace autoshard
