#include "autoshard/io/tensor_mapping.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <functional>
#include <vector>

#include "autoshard/error.h"

namespace autoshard {

namespace {

struct Layout2D {
  int64_t rows = 1, cols = 1, stride = 0;
};

Layout2D layout_2d(const TensorMapping& m, const Shape& shape) {
  Layout2D l;
  for (int d = 0; d < static_cast<int>(shape.size()); ++d)
    (d < m.row_dims ? l.rows : l.cols) *= shape[d];
  l.stride = m.row_stride < 0 ? l.cols : m.row_stride;
  return l;
}

// Calls run(block_offset, file_element, length) for every contiguous run of
// the device's block (runs follow the block's last dimension).
void for_each_run(const TensorMapping& m, const Shape& shape, const Sharding& layout,
                  const DeviceMesh& mesh, int device,
                  const std::function<void(int64_t, int64_t, int64_t)>& run) {
  const Layout2D l = layout_2d(m, shape);
  const Shape local = layout.local_shape(shape, mesh, device);
  const std::vector<int64_t> off = layout.offsets(shape, mesh, device);
  const std::vector<int64_t> gstride = strides_of(shape);
  const size_t r = shape.size();
  if (numel(local) == 0) return;
  if (r == 0) {
    run(0, m.col_offset, 1);
    return;
  }
  const int64_t len = local[r - 1];
  std::vector<int64_t> idx(r, 0);
  for (int64_t done = 0; done < numel(local); done += len) {
    int64_t global = 0;
    for (size_t d = 0; d < r; ++d) global += (idx[d] + off[d]) * gstride[d];
    const int64_t row = global / l.cols, col = global % l.cols;
    run(done, row * l.stride + m.col_offset + col, len);
    for (size_t d = r - 1; d-- > 0;) {
      if (++idx[d] < local[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace

void check_mapping(const SafetensorsFile& file, const TensorMapping& m, const Shape& shape,
                   const std::string& weight) {
  AS_CHECK(file.contains(m.tensor), "'", file.path(), "' has no tensor '", m.tensor,
           "' (needed for weight '", weight, "')");
  const SafetensorsEntry& e = file.entry(m.tensor);
  AS_CHECK(e.dtype == "F32" || e.dtype == "F16" || e.dtype == "BF16", "'", file.path(),
           "': tensor '", m.tensor, "' has dtype ", e.dtype, "; weights must be F32, F16 or BF16");
  const Shape want = m.file_shape.empty() ? shape : m.file_shape;
  AS_CHECK(e.shape == want, "'", file.path(), "': tensor '", m.tensor, "' has shape ",
           shape_str(e.shape), " but weight '", weight, "' needs ", shape_str(want),
           " (a checkpoint of another model size or architecture?)");
  const Layout2D l = layout_2d(m, shape);
  const int64_t size = numel(e.shape);
  const int64_t last =
      l.rows == 0 || l.cols == 0 ? -1 : (l.rows - 1) * l.stride + m.col_offset + l.cols - 1;
  AS_CHECK(last < size && l.cols + m.col_offset <= l.stride, "internal: weight '", weight,
           "' does not fit tensor '", m.tensor, "' ", shape_str(e.shape));
}

Tensor read_block(const SafetensorsFile& file, const TensorMapping& m, const Shape& shape,
                  const Sharding& layout, const DeviceMesh& mesh, int device) {
  const SafetensorsEntry& e = file.entry(m.tensor);
  const size_t elem = safetensors_dtype_size(e.dtype);
  Tensor block(layout.local_shape(shape, mesh, device));
  std::vector<uint16_t> half;
  for_each_run(m, shape, layout, mesh, device, [&](int64_t at, int64_t src, int64_t len) {
    float* dst = block.f32() + at;
    if (e.dtype == "F32") {
      file.read_bytes(e, src * elem, dst, len * elem);
      return;
    }
    half.resize(len);
    file.read_bytes(e, src * elem, half.data(), len * elem);
    for (int64_t i = 0; i < len; ++i) {
      uint32_t bits;
      if (e.dtype == "BF16") {
        bits = uint32_t(half[i]) << 16;
        std::memcpy(dst + i, &bits, 4);
      } else {
        dst[i] = half_to_float(half[i]);
      }
    }
  });
  return block;
}

void write_block(int fd, uint64_t data_offset, const TensorMapping& m, const Shape& shape,
                 const Sharding& layout, const DeviceMesh& mesh, int device, const Tensor& block,
                 const std::string& dtype) {
  AS_CHECK(dtype == "F32" || dtype == "F16" || dtype == "BF16", "cannot write tensor '", m.tensor,
           "' as ", dtype, " (F32, F16 or BF16)");
  const size_t elem = safetensors_dtype_size(dtype);
  std::vector<uint16_t> half;
  for_each_run(m, shape, layout, mesh, device, [&](int64_t at, int64_t dst, int64_t len) {
    const float* src = block.f32() + at;
    const char* p = reinterpret_cast<const char*>(src);
    if (elem == 2) {
      half.resize(static_cast<size_t>(len));
      for (int64_t i = 0; i < len; ++i)
        half[i] = dtype == "BF16" ? float_to_bf16(src[i]) : float_to_half(src[i]);
      p = reinterpret_cast<const char*>(half.data());
    }
    size_t left = static_cast<size_t>(len) * elem;
    off_t pos = static_cast<off_t>(data_offset + dst * elem);
    while (left > 0) {
      ssize_t w = ::pwrite(fd, p, left, pos);
      if (w < 0 && errno == EINTR) continue;
      AS_CHECK(w > 0, "writing tensor '", m.tensor, "' failed: ", std::strerror(errno));
      p += w, pos += w, left -= static_cast<size_t>(w);
    }
  });
}

WeightSource mapped_source(std::shared_ptr<const SafetensorsFile> file, TensorMapping map) {
  WeightSource s;
  s.check = [file, map](const std::string& weight, const Shape& shape) {
    check_mapping(*file, map, shape, weight);
  };
  s.read = [file, map](const Shape& shape, const Sharding& layout, const DeviceMesh& mesh,
                       int device) {
    Tensor block = read_block(*file, map, shape, layout, mesh, device);
    check_finite(block.f32(), block.numel(), map.tensor, file->path());
    return block;
  };
  return s;
}

void check_finite(const float* values, int64_t n, const std::string& tensor,
                  const std::string& file) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) [[unlikely]]
      fail("weights: tensor '", tensor, "' in '", file, "' holds ",
           std::isnan(values[i]) ? "NaN" : "an infinite value",
           ": the file is damaged or was saved from a run that diverged; use other weights");
}

}  // namespace autoshard
