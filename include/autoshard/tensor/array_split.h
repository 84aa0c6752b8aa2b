// array_split: numpy's rule for splitting n elements into k parts, the one
// rule every uneven shard in autoshard follows. The first n % k parts get one
// extra element: 10 into 3 -> 4,3,3; 1 into 2 -> 1,0.
#pragma once

#include <cstdint>
#include <vector>

#include "autoshard/tensor/tensor.h"

namespace autoshard {

// Size of part `index` when n elements are split into `parts`.
int64_t split_size(int64_t n, int64_t parts, int64_t index);
// Offset of part `index` when n elements are split into `parts`.
int64_t split_offset(int64_t n, int64_t parts, int64_t index);
// All part sizes.
std::vector<int64_t> split_sizes(int64_t n, int64_t parts);
// Nested: n split into parts[0], each of those into parts[1], and so on;
// every innermost part's size, the outermost index most significant (10
// into {2, 2}: 3 2 3 2).
std::vector<int64_t> nested_split_sizes(int64_t n, const std::vector<int64_t>& parts);

// Copies the block [offset, offset + size) along `axis` of x.
Tensor slice_axis(const Tensor& x, int axis, int64_t offset, int64_t size);
// Writes `part` into the block of `dst` along `axis` starting at offset.
void write_axis(Tensor& dst, const Tensor& part, int axis, int64_t offset);
// Joins parts along `axis` (the inverse of array_split).
Tensor concatenate(const std::vector<Tensor>& parts, int axis);

namespace ops {
// numpy.array_split(x, sections, axis). sections <= 0 throws.
std::vector<Tensor> array_split(const Tensor& x, int64_t sections, int axis = 0);
}  // namespace ops

}  // namespace autoshard
