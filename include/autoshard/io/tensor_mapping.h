// TensorMapping: where a model weight lives inside a tensor of a file, so
// that each device reads (or writes) only the byte runs of its own block.
//
// The weight, viewed as [rows, cols] (rows = the product of its first
// `row_dims` dimensions), sits in the file tensor at element
// row * row_stride + col_offset + col. That covers plain tensors (row_stride =
// cols, col_offset = 0) and the reshapes and column ranges that checkpoint
// formats use (Hugging Face's fused c_attn holds query, key and value side by
// side; [C, H, D] kernels are [C, H*D] matrices).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "autoshard/io/safetensors.h"
#include "autoshard/nn/weight_source.h"
#include "autoshard/tensor/mesh.h"
#include "autoshard/tensor/sharding.h"

namespace autoshard {

struct TensorMapping {
  std::string tensor;  // name of the tensor in the file
  int row_dims = 1;
  int64_t row_stride = -1;  // -1: the weight's own cols (a plain tensor)
  int64_t col_offset = 0;
  Shape file_shape;  // the shape the file's tensor must have; empty: the weight's own

  static TensorMapping plain(std::string name) { return {std::move(name), 0, -1, 0, {}}; }
};

// A model weight's values read from an open safetensors file through a
// mapping; a block holding NaN or infinity is an error (check_finite).
WeightSource mapped_source(std::shared_ptr<const SafetensorsFile> file, TensorMapping map);

// Throws naming `tensor` and `file` when one of the n values is NaN or
// infinite: such a weight makes every output NaN (a token 0 generated, a loss
// of nan), so a file holding one is refused when it is read.
void check_finite(const float* values, int64_t n, const std::string& tensor,
                  const std::string& file);

// Checks that the file tensor has the shape the mapping expects (the weight's
// own for a plain mapping: a tensor with the right element count but another
// shape is an error, never a silent reshuffle) and a dtype that loads as f32
// (errors name the weight and the tensor).
void check_mapping(const SafetensorsFile& file, const TensorMapping& m, const Shape& shape,
                   const std::string& weight);

// Reads `device`'s block of a weight of global `shape` under `layout`: only
// its own byte runs (pread), converted to f32.
Tensor read_block(const SafetensorsFile& file, const TensorMapping& m, const Shape& shape,
                  const Sharding& layout, const DeviceMesh& mesh, int device);

// Writes a block (f32) into a file tensor of `dtype` (F32, or F16 / BF16
// rounded to nearest even) whose data starts at byte `data_offset` of the
// open file `fd` (pwrite of its runs).
void write_block(int fd, uint64_t data_offset, const TensorMapping& m, const Shape& shape,
                 const Sharding& layout, const DeviceMesh& mesh, int device, const Tensor& block,
                 const std::string& dtype = "F32");

}  // namespace autoshard
