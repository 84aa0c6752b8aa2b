#include "autoshard/tensor/array_split.h"

#include <cstring>

#include "autoshard/error.h"

namespace autoshard {

int64_t split_size(int64_t n, int64_t parts, int64_t index) {
  return n / parts + (index < n % parts ? 1 : 0);
}

int64_t split_offset(int64_t n, int64_t parts, int64_t index) {
  int64_t extra = n % parts;
  return index * (n / parts) + (index < extra ? index : extra);
}

std::vector<int64_t> split_sizes(int64_t n, int64_t parts) {
  std::vector<int64_t> sizes(parts);
  for (int64_t i = 0; i < parts; ++i) sizes[i] = split_size(n, parts, i);
  return sizes;
}

std::vector<int64_t> nested_split_sizes(int64_t n, const std::vector<int64_t>& parts) {
  // Finest first in place: the partitioner asks this of every collective,
  // over axes of up to thousands of members.
  int64_t total = 1;
  for (int64_t k : parts) total *= k;
  std::vector<int64_t> sizes(size_t(total), n);
  int64_t count = 1;  // blocks so far, sizes[0, count)
  for (int64_t k : parts) {
    for (int64_t b = count - 1; b >= 0; --b) {
      const int64_t s = sizes[size_t(b)];
      for (int64_t i = k - 1; i >= 0; --i) sizes[size_t(b * k + i)] = split_size(s, k, i);
    }
    count *= k;
  }
  return sizes;
}

namespace {
int normalize_axis(int axis, int rank) {
  int a = axis < 0 ? axis + rank : axis;
  AS_CHECK(a >= 0 && a < rank, "axis ", axis, " out of range for a rank-", rank, " tensor");
  return a;
}

// View of a row-major tensor as [outer, axis, inner] in bytes.
struct AxisView {
  int64_t outer = 1, inner_bytes = 1;
};
AxisView axis_view(const Shape& shape, int axis, size_t elem) {
  AxisView v;
  for (int i = 0; i < axis; ++i) v.outer *= shape[i];
  int64_t inner = 1;
  for (size_t i = axis + 1; i < shape.size(); ++i) inner *= shape[i];
  v.inner_bytes = inner * static_cast<int64_t>(elem);
  return v;
}
}  // namespace

Tensor slice_axis(const Tensor& x, int axis, int64_t offset, int64_t size) {
  axis = normalize_axis(axis, x.rank());
  AS_CHECK(offset >= 0 && size >= 0 && offset + size <= x.shape()[axis], "slice [", offset, ", ",
           offset + size, ") out of range for axis ", axis, " of ", shape_str(x.shape()));
  Shape out_shape = x.shape();
  out_shape[axis] = size;
  Tensor out(out_shape, x.dtype());
  AxisView v = axis_view(x.shape(), axis, dtype_size(x.dtype()));
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  int64_t n = x.shape()[axis];
  for (int64_t o = 0; o < v.outer && size > 0; ++o)
    std::memcpy(dst + o * size * v.inner_bytes, src + (o * n + offset) * v.inner_bytes,
                size * v.inner_bytes);
  return out;
}

void write_axis(Tensor& dst, const Tensor& part, int axis, int64_t offset) {
  axis = normalize_axis(axis, dst.rank());
  int64_t size = part.rank() ? part.shape()[axis] : 1;
  AxisView v = axis_view(dst.shape(), axis, dtype_size(dst.dtype()));
  const auto* src = static_cast<const std::byte*>(part.raw());
  auto* out = static_cast<std::byte*>(dst.raw());
  int64_t n = dst.shape()[axis];
  for (int64_t o = 0; o < v.outer && size > 0; ++o)
    std::memcpy(out + (o * n + offset) * v.inner_bytes, src + o * size * v.inner_bytes,
                size * v.inner_bytes);
}

Tensor concatenate(const std::vector<Tensor>& parts, int axis) {
  AS_CHECK(!parts.empty(), "concatenate needs at least one part");
  axis = normalize_axis(axis, parts[0].rank());
  Shape shape = parts[0].shape();
  shape[axis] = 0;
  for (const Tensor& p : parts) shape[axis] += p.shape()[axis];
  Tensor out(shape, parts[0].dtype());
  int64_t offset = 0;
  for (const Tensor& p : parts) {
    write_axis(out, p, axis, offset);
    offset += p.shape()[axis];
  }
  return out;
}

namespace ops {
std::vector<Tensor> array_split(const Tensor& x, int64_t sections, int axis) {
  AS_CHECK(sections > 0, "array_split: sections must be positive, got ", sections);
  axis = normalize_axis(axis, x.rank());
  int64_t n = x.shape()[axis];
  std::vector<Tensor> parts;
  for (int64_t i = 0; i < sections; ++i)
    parts.push_back(slice_axis(x, axis, split_offset(n, sections, i), split_size(n, sections, i)));
  return parts;
}
}  // namespace ops

}  // namespace autoshard
