// The ops a partitioned program adds: collectives over one mesh axis, local
// slices, and in-place assignment. They exist only in per-device graphs.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "autoshard/comm/communicator.h"
#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {

const CommGroup& KernelContext::group(int axis) const {
  const CommGroup* g = comm && groups ? group_of_axis(*groups, axis) : nullptr;
  AS_CHECK(g != nullptr, "internal: a collective ran without a communicator for mesh axis ", axis);
  return *g;
}

namespace {

// [outer, dim, inner] view of a shape around one dimension.
struct Around {
  int64_t outer = 1, inner = 1;
};
Around around(const Shape& s, int64_t dim) {
  Around a;
  for (int64_t i = 0; i < dim; ++i) a.outer *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) a.inner *= s[i];
  return a;
}

// Elements of each member's block of a tensor split along one dimension.
std::vector<int64_t> member_counts(const std::vector<int64_t>& sizes, const Around& a) {
  std::vector<int64_t> counts;
  for (int64_t s : sizes) counts.push_back(a.outer * s * a.inner);
  return counts;
}

// Reused per device thread; never empty, so its pointer is never null (a
// zero-length copy to null is still undefined behaviour).
thread_local std::vector<float> scratch(1);
float* scratch_of(int64_t count) {
  if (static_cast<int64_t>(scratch.size()) < count) scratch.resize(count);
  return scratch.data();
}

ShapeAndType all_reduce_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  return {input_shape(g, n, 0), DType::F32};
}

void all_reduce_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext& ctx) {
  if (out.raw() != in[0]->raw()) std::memcpy(out.raw(), in[0]->raw(), out.nbytes());
  const AllReduceAttrs& a = n.attr<AllReduceAttrs>();
  ctx.comm->all_reduce(out.f32(), out.numel(), a.op, ctx.group(a.axis));
}

ShapeAndType all_gather_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const SplitAttrs& a = n.attr<SplitAttrs>();
  Shape s = input_shape(g, n, 0);
  int64_t total = 0;
  for (int64_t v : a.sizes) total += v;
  s[a.dim] = total;
  return {s, input_dtype(g, n, 0)};
}

// Gathers every member's block along `dim`; when dim is not the outermost
// non-trivial one, the flat gather is interleaved into place.
void all_gather_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext& ctx) {
  const SplitAttrs& sa = n.attr<SplitAttrs>();
  const std::vector<int64_t>& sizes = sa.sizes;
  const Around a = around(out.shape(), sa.dim);
  const std::vector<int64_t> counts = member_counts(sizes, a);
  const CommGroup& g = ctx.group(sa.axis);
  // Gathers move 4-byte words: i32 ids travel as their bit patterns.
  const auto* src = static_cast<const float*>(in[0]->raw());
  auto* dst = static_cast<float*>(out.raw());
  if (a.outer == 1) {
    ctx.comm->all_gather(src, dst, counts, g);
    return;
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  float* flat = scratch_of(total);
  ctx.comm->all_gather(src, flat, counts, g);
  const int64_t row = out.shape()[sa.dim] * a.inner;
  int64_t from = 0, col = 0;
  for (int64_t s : sizes) {
    for (int64_t o = 0; o < a.outer; ++o)
      std::memcpy(dst + o * row + col, flat + from + o * s * a.inner, s * a.inner * sizeof(float));
    from += a.outer * s * a.inner;
    col += s * a.inner;
  }
}

// A gather or all-to-all of a bf16 block (a frozen weight the partitioner
// lays out anew): the Communicator moves 4-byte words, so the block travels
// widened to f32 (exact both ways) and the result is narrowed back.
template <void (*Kernel)(const Node&, std::span<Tensor* const>, Tensor&, const KernelContext&)>
void widened_if_bf16(const Node& n, std::span<Tensor* const> in, Tensor& out,
                     const KernelContext& ctx) {
  if (in[0]->dtype() != DType::BF16) return Kernel(n, in, out, ctx);
  Tensor wide_in = in[0]->converted(DType::F32), wide_out(out.shape(), DType::F32);
  Tensor* ins[] = {&wide_in};
  Kernel(n, std::span<Tensor* const>(ins), wide_out, ctx);
  const Tensor narrow = wide_out.converted(DType::BF16);
  if (out.nbytes()) std::memcpy(out.raw(), narrow.raw(), out.nbytes());
}

ShapeAndType reduce_scatter_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const SplitAttrs& a = n.attr<SplitAttrs>();
  Shape s = input_shape(g, n, 0);
  s[a.dim] = a.sizes[a.index];
  return {s, DType::F32};
}

void reduce_scatter_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                           const KernelContext& ctx) {
  const SplitAttrs& sa = n.attr<SplitAttrs>();
  const std::vector<int64_t>& sizes = sa.sizes;
  const Around a = around(in[0]->shape(), sa.dim);
  const std::vector<int64_t> counts = member_counts(sizes, a);
  const CommGroup& g = ctx.group(sa.axis);
  if (a.outer == 1) {
    ctx.comm->reduce_scatter(in[0]->f32(), out.f32(), counts, g);
    return;
  }
  // Pack each member's block contiguously first.
  float* packed = scratch_of(in[0]->numel());
  const int64_t row = in[0]->shape()[sa.dim] * a.inner;
  int64_t dst = 0, col = 0;
  for (int64_t s : sizes) {
    for (int64_t o = 0; o < a.outer; ++o)
      std::memcpy(packed + dst + o * s * a.inner, in[0]->f32() + o * row + col,
                  s * a.inner * sizeof(float));
    dst += a.outer * s * a.inner;
    col += s * a.inner;
  }
  ctx.comm->reduce_scatter(packed, out.f32(), counts, g);
}

ShapeAndType slice_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  Shape s = input_shape(g, n, 0);
  const SliceAttrs& a = n.attr<SliceAttrs>();
  AS_CHECK(a.dim >= 0 && a.dim < static_cast<int>(s.size()) && a.begin >= 0 &&
               a.begin + a.size <= s[a.dim],
           "internal: slice out of range");
  s[a.dim] = a.size;
  return {s, input_dtype(g, n, 0)};
}

void slice_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const SliceAttrs& sl = n.attr<SliceAttrs>();
  const int64_t dim = sl.dim, begin = sl.begin, size = sl.size;
  const Around a = around(in[0]->shape(), dim);
  const int64_t row = in[0]->shape()[dim] * a.inner;
  const auto* src = static_cast<const char*>(in[0]->raw());
  auto* dst = static_cast<char*>(out.raw());
  const size_t bytes = dtype_size(out.dtype());  // bf16 blocks of a frozen weight too
  const size_t block = size * a.inner * bytes;
  for (int64_t o = 0; o < a.outer; ++o)
    std::memcpy(dst + o * block, src + (o * row + begin * a.inner) * bytes, block);
}

ShapeAndType halo_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const HaloAttrs& a = n.attr<HaloAttrs>();
  Shape s = input_shape(g, n, 0);
  AS_CHECK(a.dim >= 0 && a.dim < static_cast<int>(s.size()) && a.index >= 0 &&
               a.index < static_cast<int>(a.sizes.size()) && a.sizes[a.index] == s[a.dim] &&
               a.begins.size() == a.sizes.size() && a.ends.size() == a.sizes.size(),
           "internal: halo exchange of a block that is not its member's");
  s[a.dim] = a.ends[a.index] - a.begins[a.index];
  return {s, input_dtype(g, n, 0)};
}

// Each member sends every other the rows of its band that the other's
// window holds (its neighbours', for a window a little wider than a band),
// all at once: an all-to-all whose counts are zero beyond the neighbours.
void halo_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                 const KernelContext& ctx) {
  const HaloAttrs& h = n.attr<HaloAttrs>();
  const int members = static_cast<int>(h.sizes.size()), me = h.index;
  const Around a = around(in[0]->shape(), h.dim);
  std::vector<int64_t> offset(members + 1, 0);
  for (int j = 0; j < members; ++j) offset[j + 1] = offset[j] + h.sizes[j];
  // Rows [lo, hi) of member j's band inside member i's window.
  auto overlap = [&](int j, int i) {
    const int64_t lo = std::max(offset[j], h.begins[i]);
    return std::pair{lo, std::max(lo, std::min(offset[j + 1], h.ends[i]))};
  };
  std::vector<int64_t> send(members), recv(members);
  int64_t send_total = 0;
  for (int j = 0; j < members; ++j) {
    auto [slo, shi] = overlap(me, j);
    auto [rlo, rhi] = overlap(j, me);
    send[j] = a.outer * (shi - slo) * a.inner;
    recv[j] = a.outer * (rhi - rlo) * a.inner;
    send_total += send[j];
  }
  const auto* src = static_cast<const float*>(in[0]->raw());
  auto* dst = static_cast<float*>(out.raw());
  const int64_t in_rows = h.sizes[me], out_rows = h.ends[me] - h.begins[me];
  float* packed = scratch_of(send_total + out.numel());
  float* received = packed + send_total;
  float* p = packed;
  for (int j = 0; j < members; ++j) {
    auto [lo, hi] = overlap(me, j);
    for (int64_t o = 0; o < a.outer && hi > lo; ++o, p += (hi - lo) * a.inner)
      std::memcpy(p, src + (o * in_rows + lo - offset[me]) * a.inner,
                  (hi - lo) * a.inner * sizeof(float));
  }
  ctx.comm->all_to_all(packed, send, received, recv, ctx.group(h.axis));
  const float* r = received;
  for (int j = 0; j < members; ++j) {
    auto [lo, hi] = overlap(j, me);
    for (int64_t o = 0; o < a.outer && hi > lo; ++o, r += (hi - lo) * a.inner)
      std::memcpy(dst + (o * out_rows + lo - h.begins[me]) * a.inner, r,
                  (hi - lo) * a.inner * sizeof(float));
  }
}

ShapeAndType all_to_all_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const AllToAllAttrs& a = n.attr<AllToAllAttrs>();
  Shape s = input_shape(g, n, 0);
  const int members = static_cast<int>(a.gather_sizes.size());
  AS_CHECK(
      a.gather_dim != a.split_dim && a.gather_dim >= 0 && a.split_dim >= 0 &&
          a.gather_dim < static_cast<int>(s.size()) && a.split_dim < static_cast<int>(s.size()) &&
          a.index >= 0 && a.index < members && static_cast<int>(a.split_sizes.size()) == members &&
          a.gather_sizes[a.index] == s[a.gather_dim] &&
          std::accumulate(a.split_sizes.begin(), a.split_sizes.end(), int64_t{0}) == s[a.split_dim],
      "internal: all-to-all of a block that is not its member's");
  s[a.gather_dim] = std::accumulate(a.gather_sizes.begin(), a.gather_sizes.end(), int64_t{0});
  s[a.split_dim] = a.split_sizes[a.index];
  return {s, input_dtype(g, n, 0)};
}

// Member i holds rows gather_sizes[i] of gather_dim, whole along split_dim.
// It sends member j the columns of j's new block (a slab along split_dim,
// packed contiguously), and receives from each member j that member's rows
// of its own new block, which land at j's offset along gather_dim. Words
// move as 4-byte patterns (i32 ids too).
void all_to_all_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext& ctx) {
  const AllToAllAttrs& a = n.attr<AllToAllAttrs>();
  const int members = static_cast<int>(a.gather_sizes.size());
  const Shape& in_shape = in[0]->shape();
  const Around sending = around(in_shape, a.split_dim);
  const Around receiving = around(out.shape(), a.gather_dim);
  // A member's new block as this member holds it: its rows of it, shape
  // `in_shape` with split_dim cut to that member's size.
  std::vector<int64_t> send(members), recv(members);
  for (int j = 0; j < members; ++j) {
    send[j] = sending.outer * a.split_sizes[j] * sending.inner;
    recv[j] = receiving.outer * a.gather_sizes[j] * receiving.inner;
  }
  const auto* src = static_cast<const float*>(in[0]->raw());
  auto* dst = static_cast<float*>(out.raw());
  float* packed = scratch_of(in[0]->numel() + out.numel());
  float* received = packed + in[0]->numel();
  const int64_t in_row = in_shape[a.split_dim] * sending.inner;
  float* p = packed;
  int64_t col = 0;
  for (int j = 0; j < members; ++j) {
    const int64_t piece = a.split_sizes[j] * sending.inner;
    for (int64_t o = 0; o < sending.outer; ++o, p += piece)
      std::memcpy(p, src + o * in_row + col, piece * sizeof(float));
    col += piece;
  }
  ctx.comm->all_to_all(packed, send, received, recv, ctx.group(a.axis));
  const int64_t out_row = out.shape()[a.gather_dim] * receiving.inner;
  const float* r = received;
  col = 0;
  for (int j = 0; j < members; ++j) {
    const int64_t piece = a.gather_sizes[j] * receiving.inner;
    for (int64_t o = 0; o < receiving.outer; ++o, r += piece)
      std::memcpy(dst + o * out_row + col, r, piece * sizeof(float));
    col += piece;
  }
}

ShapeAndType assign_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  AS_CHECK(input_shape(g, n, 0) == input_shape(g, n, 1), "internal: assign shapes differ");
  return {{}, DType::F32};
}

void assign_kernel(const Node&, std::span<Tensor* const> in, Tensor&, const KernelContext&) {
  std::memcpy(in[0]->raw(), in[1]->raw(), in[0]->nbytes());
}

// Collectives are priced by the communication model, not as compute: they
// state what they move.
CommCost all_reduce_comm(const Node& n, const CostShapes& s) {
  const double bytes = elements(s.output) * 4;
  return {CommCost::Kind::AllReduce, n.attr<AllReduceAttrs>().axis, bytes, bytes};
}
CommCost split_comm(const Node& n, const CostShapes& s) {
  const SplitAttrs& a = n.attr<SplitAttrs>();
  const bool gather = n.op == Op::AllGather;
  const Shape& whole = gather ? s.output : s.inputs[0];
  const double row = elements(whole) / double(std::max<int64_t>(1, whole[a.dim]));
  const int64_t largest = *std::max_element(a.sizes.begin(), a.sizes.end());
  return {gather ? CommCost::Kind::AllGather : CommCost::Kind::ReduceScatter, a.axis,
          elements(whole) * 4, row * double(largest) * 4};
}

// A halo exchange moves the rows of the window this member does not hold:
// priced as an all-gather of those rows.
CommCost halo_comm(const Node& n, const CostShapes& s) {
  const HaloAttrs& h = n.attr<HaloAttrs>();
  const double row = elements(s.output) / double(std::max<int64_t>(1, s.output[h.dim]));
  int64_t largest = 0;
  for (size_t j = 0; j < h.sizes.size(); ++j)
    largest = std::max(largest, h.ends[j] - h.begins[j] - h.sizes[j]);
  const double moved = row * double(std::max<int64_t>(0, largest));
  return {CommCost::Kind::AllGather, h.axis, moved * double(h.sizes.size()) * 4, moved * 4};
}

// Each member sends every other its part of the other's new block: n - 1
// pieces, the largest its share of the largest block.
CommCost all_to_all_comm(const Node& n, const CostShapes& s) {
  const AllToAllAttrs& a = n.attr<AllToAllAttrs>();
  const Shape& block = s.inputs[0];
  const double row = elements(block) / double(std::max<int64_t>(1, block[a.split_dim]));
  const int64_t largest = *std::max_element(a.split_sizes.begin(), a.split_sizes.end());
  return {CommCost::Kind::AllToAll, a.axis, elements(block) * 4, row * double(largest) * 4};
}

OpCost collective_cost(const Node&, const CostShapes&) {
  return {};
}
OpCost slice_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 0);
}

}  // namespace

void register_collective_ops(std::vector<OpDef>& t) {
  t[size_t(Op::AllReduce)] = {.name = "all_reduce",
                              .infer = all_reduce_infer,
                              .kernel = all_reduce_kernel,
                              .cost = collective_cost,
                              .comm = all_reduce_comm,
                              .local_only = true,
                              .collective = CommCost::Kind::AllReduce};
  t[size_t(Op::AllGather)] = {.name = "all_gather",
                              .infer = all_gather_infer,
                              .kernel = widened_if_bf16<all_gather_kernel>,
                              .cost = collective_cost,
                              .comm = split_comm,
                              .reads_bf16 = 0b1,
                              .local_only = true,
                              .collective = CommCost::Kind::AllGather};
  t[size_t(Op::ReduceScatter)] = {.name = "reduce_scatter",
                                  .infer = reduce_scatter_infer,
                                  .kernel = reduce_scatter_kernel,
                                  .cost = collective_cost,
                                  .comm = split_comm,
                                  .local_only = true,
                                  .collective = CommCost::Kind::ReduceScatter};
  t[size_t(Op::Slice)] = {.name = "slice",
                          .infer = slice_infer,
                          .kernel = slice_kernel,
                          .cost = slice_cost,
                          .reads_bf16 = 0b1,
                          .local_only = true};
  t[size_t(Op::HaloExchange)] = {.name = "halo_exchange",
                                 .infer = halo_infer,
                                 .kernel = halo_kernel,
                                 .cost = collective_cost,
                                 .comm = halo_comm,
                                 .local_only = true};
  t[size_t(Op::AllToAll)] = {.name = "all_to_all",
                             .infer = all_to_all_infer,
                             .kernel = widened_if_bf16<all_to_all_kernel>,
                             .cost = collective_cost,
                             .comm = all_to_all_comm,
                             .reads_bf16 = 0b1,
                             .local_only = true,
                             .collective = CommCost::Kind::AllToAll};
  t[size_t(Op::Assign)] = {.name = "assign",
                           .infer = assign_infer,
                           .kernel = assign_kernel,
                           .side_effect = true,
                           .cost = slice_cost,
                           .local_only = true,
                           .writes_weight = true};
}

}  // namespace autoshard
