#include "autoshard/tensor/sharding.h"

#include <algorithm>
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/tensor/array_split.h"

namespace autoshard {

bool Sharding::is_partial(int axis) const {
  return std::find(partial.begin(), partial.end(), axis) != partial.end();
}

int Sharding::dim_of(int axis) const {
  for (size_t d = 0; d < dims.size(); ++d)
    if (dims[d] == axis || (!is_tuple_axis(axis) && axes_overlap(dims[d], axis)))
      return static_cast<int>(d);
  return -1;
}

bool Sharding::uses(int axis) const {
  for (int a : dims)
    if (axes_overlap(a, axis)) return true;
  for (int a : partial)
    if (axes_overlap(a, axis)) return true;
  return false;
}

namespace {
// Where `device`'s piece of a dimension of `extent` split over `axis`
// starts, and its size: nested array_split over the members.
std::pair<int64_t, int64_t> piece(int64_t extent, int axis, const DeviceMesh& mesh,
                                  const std::vector<int>& coords) {
  int64_t begin = 0;
  for (int a : axis_members(axis)) {
    begin += split_offset(extent, mesh.axis_size(a), coords[a]);
    extent = split_size(extent, mesh.axis_size(a), coords[a]);
  }
  return {begin, extent};
}
}  // namespace

bool Sharding::fully_replicated() const {
  return partial.empty() && std::all_of(dims.begin(), dims.end(), [](int a) { return a < 0; });
}

Shape Sharding::local_shape(const Shape& global, const DeviceMesh& mesh, int device) const {
  const std::vector<int> c = mesh.coordinates(device);
  Shape s = global;
  for (size_t d = 0; d < dims.size(); ++d) s[d] = piece(global[d], dims[d], mesh, c).second;
  return s;
}

std::vector<int64_t> Sharding::offsets(const Shape& global, const DeviceMesh& mesh,
                                       int device) const {
  const std::vector<int> c = mesh.coordinates(device);
  std::vector<int64_t> o(global.size(), 0);
  for (size_t d = 0; d < dims.size(); ++d) o[d] = piece(global[d], dims[d], mesh, c).first;
  return o;
}

std::string Sharding::to_string(const DeviceMesh& mesh) const {
  std::string s = "[";
  for (size_t d = 0; d < dims.size(); ++d)
    s += (d ? ", " : "") + (dims[d] < 0 ? std::string("-") : mesh.axis_name(dims[d]));
  s += "]";
  if (!partial.empty()) {
    s += partial_op == ReduceOp::Max ? " partial_max(" : " partial(";
    for (size_t i = 0; i < partial.size(); ++i) s += (i ? "," : "") + mesh.axis_names()[partial[i]];
    s += ")";
  }
  return s;
}

void Sharding::validate(const DeviceMesh& mesh, int value_rank, const std::string& what) const {
  AS_CHECK(rank() == value_rank, what, ": layout has ", rank(), " entries for a rank-", value_rank,
           " tensor");
  std::vector<bool> used(mesh.rank(), false);
  for (int id : dims) {
    if (id < 0) continue;
    AS_CHECK(mesh.has_axis(id), what, ": mesh axis ", id, " does not exist in mesh ",
             mesh.to_string());
    for (int a : axis_members(id)) {
      AS_CHECK(!used[a], what, ": mesh axis '", mesh.axis_names()[a], "' splits two dimensions");
      used[a] = true;
    }
  }
  for (int a : partial) AS_CHECK(a >= 0 && a < mesh.rank() && !used[a], what, ": bad partial axis");
}

Tensor block_of(const Tensor& whole, const Sharding& s, const DeviceMesh& mesh, int device) {
  Tensor t = whole;
  const std::vector<int64_t> off = s.offsets(whole.shape(), mesh, device);
  const Shape local = s.local_shape(whole.shape(), mesh, device);
  for (int d = 0; d < s.rank(); ++d)
    if (s.dims[d] >= 0) t = slice_axis(t, d, off[d], local[d]);
  return t.raw() == whole.raw() ? whole.clone() : t;
}

void write_block(Tensor& whole, const Tensor& block, const Sharding& s, const DeviceMesh& mesh,
                 int device) {
  // Write dimension by dimension: expand the block along each split dim in
  // turn into a slab of the whole, innermost split first.
  const std::vector<int64_t> off = s.offsets(whole.shape(), mesh, device);
  std::vector<int> split;
  for (int d = 0; d < s.rank(); ++d)
    if (s.dims[d] >= 0) split.push_back(d);
  if (split.empty()) {
    std::memcpy(whole.raw(), block.raw(), whole.nbytes());
    return;
  }
  // Element-wise copy with an odometer: simple and only used off the hot path.
  const Shape& local = block.shape();
  const std::vector<int64_t> ws = strides_of(whole.shape());
  const size_t r = local.size();
  std::vector<int64_t> idx(r, 0);
  int64_t base = 0;
  for (size_t d = 0; d < r; ++d) base += off[d] * ws[d];
  const auto* src = static_cast<const uint32_t*>(block.raw());
  auto* dst = static_cast<uint32_t*>(whole.raw());
  int64_t pos = base;
  for (int64_t e = 0; e < block.numel(); ++e) {
    dst[pos] = src[e];
    for (size_t d = r; d-- > 0;) {
      pos += ws[d];
      if (++idx[d] < local[d]) break;
      pos -= ws[d] * local[d];
      idx[d] = 0;
    }
  }
}

}  // namespace autoshard
