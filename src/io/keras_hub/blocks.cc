#include "io/keras_hub/blocks.h"

#include <algorithm>
#include <cstring>

#include "autoshard/error.h"

namespace autoshard::keras_hub {

namespace {

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t i = s.size(); i-- > 1;) st[i - 1] = st[i] * s[i];
  return st;
}

// `in` of `in_shape` transposed: the result's dim i is in's dim perm[i].
Tensor permuted(const float* in, const Shape& in_shape, const std::vector<int>& perm) {
  Shape out_shape;
  for (int p : perm) out_shape.push_back(in_shape[p]);
  Tensor out(out_shape);
  const std::vector<int64_t> in_strides = strides_of(in_shape);
  std::vector<int64_t> step(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) step[i] = in_strides[perm[i]];
  std::vector<int64_t> idx(perm.size(), 0);
  const int64_t n = numel(out_shape);
  float* o = out.f32();
  int64_t src = 0;
  for (int64_t k = 0; k < n; ++k) {
    o[k] = in[src];
    for (size_t d = perm.size(); d-- > 0;) {
      src += step[d];
      if (++idx[d] < out_shape[d]) break;
      src -= step[d] * out_shape[d];
      idx[d] = 0;
    }
  }
  return out;
}

// Copies all of `src` (extents `ext`) into `dst` (extents `dst_ext`) at
// `at`, row by row.
void copy_box(const float* src, const Shape& ext, float* dst, const Shape& dst_ext,
              const std::vector<int64_t>& at) {
  const size_t r = ext.size();
  if (numel(ext) == 0) return;
  const std::vector<int64_t> ds = strides_of(dst_ext);
  std::vector<int64_t> idx(r, 0);
  const int64_t row = ext[r - 1], rows = numel(ext) / row;
  for (int64_t k = 0; k < rows; ++k) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += (at[d] + idx[d]) * ds[d];
    std::memcpy(dst + off, src + k * row, sizeof(float) * static_cast<size_t>(row));
    for (size_t d = r - 1; d-- > 0;) {
      if (++idx[d] < ext[d]) break;
      idx[d] = 0;
    }
  }
}

// For each dim of v.split, the Keras dim it lies in.
std::vector<int> split_owners(const Variable& v) {
  std::vector<int> owner(v.split.size());
  const std::vector<int> dims = v.keras_dims();
  for (size_t i = 0; i < v.perm.size(); ++i) owner[v.perm[i]] = dims[i];
  return owner;
}

}  // namespace

Tensor read_weight_block(const Variable& v, const std::vector<int64_t>& lo, const Shape& n,
                         const HyperslabRead& read) {
  if (v.row_offset != 0) {
    // A plain [rows, cols] table whose first rows are not stored.
    AS_CHECK(n.size() == 2 && v.perm == std::vector<int>({0, 1}),
             "internal: row_offset on a transposed KerasHub variable '", v.path, "'");
    Tensor block = Tensor::zeros(n);
    const int64_t rows = v.keras_shape[0];
    const int64_t r0 = std::max(lo[0], v.row_offset);
    const int64_t r1 = std::min(lo[0] + n[0], v.row_offset + rows);
    if (r1 > r0)
      read({r0 - v.row_offset, lo[1]}, {r1 - r0, n[1]}, block.f32() + (r0 - lo[0]) * n[1]);
    return block;
  }
  // The box in split coordinates.
  const size_t S = v.split.size();
  std::vector<int64_t> slo(S), sn(S);
  for (size_t i = 0; i < v.perm.size(); ++i) {
    slo[v.perm[i]] = lo[i];
    sn[v.perm[i]] = n[i];
  }
  const std::vector<int> owner = split_owners(v);
  // In each Keras dim, the split dims from `merge` on form one contiguous run
  // (all after it whole); those before it are visited index by index.
  std::vector<bool> enumerated(S, false);
  for (size_t a = 0; a < S;) {
    size_t b = a;
    while (b < S && owner[b] == owner[a]) ++b;
    size_t merge = b - 1;
    while (merge > a && slo[merge] == 0 && sn[merge] == v.split[merge]) --merge;
    for (size_t s = a; s < merge; ++s) enumerated[s] = true;
    a = b;
  }
  const std::vector<int64_t> keras_strides_in_dim = [&] {
    std::vector<int64_t> st(S, 1);  // stride of a split dim within its Keras dim
    for (size_t s = S; s-- > 1;)
      if (owner[s - 1] == owner[s]) st[s - 1] = st[s] * v.split[s];
    return st;
  }();
  std::vector<float> buf(static_cast<size_t>(numel(sn)));
  std::vector<int64_t> idx(slo);  // current index of each enumerated dim
  for (bool more = numel(sn) > 0; more;) {
    std::vector<int64_t> offset(v.keras_shape.size(), 0);
    Shape count(v.keras_shape.size(), 1), ext(S), at(S);
    for (size_t s = 0; s < S; ++s) {
      const int64_t start = enumerated[s] ? idx[s] : slo[s];
      offset[owner[s]] += start * keras_strides_in_dim[s];
      ext[s] = enumerated[s] ? 1 : sn[s];
      at[s] = enumerated[s] ? idx[s] - slo[s] : 0;
      if (!enumerated[s]) count[owner[s]] *= sn[s];
    }
    std::vector<float> run(static_cast<size_t>(numel(count)));
    read(offset, count, run.data());
    copy_box(run.data(), ext, buf.data(), sn, at);
    more = false;
    for (size_t s = S; s-- > 0;) {
      if (!enumerated[s]) continue;
      if (++idx[s] < slo[s] + sn[s]) {
        more = true;
        break;
      }
      idx[s] = slo[s];
    }
  }
  return permuted(buf.data(), sn, v.perm);
}

Tensor keras_value(const Variable& v, const Tensor& weight) {
  AS_CHECK(weight.shape() == v.weight_shape(), "KerasHub variable '", v.path, "': weight '",
           v.weight, "' has shape ", shape_str(weight.shape()), ", not ",
           shape_str(v.weight_shape()));
  const float* data = weight.f32();
  Shape shape = weight.shape();
  if (v.row_offset != 0) {  // drop the rows the variable does not hold
    data += v.row_offset * shape[1];
    shape[0] -= v.row_offset;
  }
  std::vector<int> inverse(v.perm.size());
  for (size_t i = 0; i < v.perm.size(); ++i) inverse[v.perm[i]] = static_cast<int>(i);
  return permuted(data, shape, inverse).reshaped(v.keras_shape);
}

Tensor weight_value(const Variable& v, const Tensor& keras) {
  AS_CHECK(keras.shape() == v.keras_shape, "KerasHub variable '", v.path, "' has shape ",
           shape_str(keras.shape()), ", not ", shape_str(v.keras_shape));
  Tensor w = permuted(keras.f32(), v.split, v.perm);
  if (v.row_offset == 0) return w;
  Tensor out = Tensor::zeros(v.weight_shape());
  std::memcpy(out.f32() + v.row_offset * w.shape()[1], w.f32(),
              sizeof(float) * static_cast<size_t>(w.numel()));
  return out;
}

}  // namespace autoshard::keras_hub
