// Vision ops, channels last, 1 or 2 spatial dims: one convolution (with
// strides, dilation, explicit padding and feature groups) and its two
// gradients, one pooling op (max or average) and its gradient, and Pad.
//
// A 1-D op runs as a 2-D one whose first spatial dim has extent 1. Every
// kernel reads its geometry from its local tensors and its (localized)
// padding: a device holding a band of output rows reads the input through
// a padding shifted by where the two bands sit (conv_localize), so one
// kernel serves the whole value, a band of it, and a band with a halo.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/array_split.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"
#include "ir/ops/gemm.h"
#include "ir/ops/vision_kernels.h"

namespace autoshard {
namespace {

int64_t floor_div(int64_t a, int64_t b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
int64_t ceil_div(int64_t a, int64_t b) {
  return -floor_div(-a, b);
}

// Output extent of one spatial dim.
int64_t out_extent(int64_t in, int64_t lo, int64_t hi, int64_t span, int64_t stride) {
  return floor_div(in + lo + hi - span, stride) + 1;
}

void check_spatial(const std::vector<int64_t>& v, size_t sp, const char* what, const char* op,
                   int64_t min) {
  AS_CHECK(v.size() == sp, op, ": ", what, " needs one value per spatial dim (", sp, "), got ",
           v.size());
  for (int64_t x : v) AS_CHECK(x >= min, op, ": ", what, " must be at least ", min, ", got ", x);
}

// The geometry of a convolution between x [b, *s, cin] and y [b, *o, cout]
// (2 spatial dims; a 1-D op gets a leading spatial dim of extent 1).
ConvGeometry geometry(const ConvAttrs& a, const Shape& x, const Shape& w, const Shape& y,
                      bool grad_input = false) {
  const size_t sp = x.size() - 2;
  ConvGeometry g;
  g.batch = x[0];
  g.in_h = sp == 2 ? x[1] : 1;
  g.in_w = x[sp];
  g.out_h = sp == 2 ? y[1] : 1;
  g.out_w = y[sp];
  g.k_h = sp == 2 ? w[0] : 1;
  g.k_w = w[sp - 1];
  g.stride_h = sp == 2 ? a.strides[0] : 1;
  g.stride_w = a.strides[sp - 1];
  g.dil_h = sp == 2 ? a.dilations[0] : 1;
  g.dil_w = a.dilations[sp - 1];
  g.pad_h = sp == 2 ? a.pad_lo[0] : 0;
  g.pad_w = a.pad_lo[sp - 1];
  g.cin = x.back();
  g.cout = y.back();
  g.group_in = w[sp];
  g.groups = a.groups;
  // A split grouped op knows the global output channels (its input
  // gradient holds all of them).
  g.group_out = (a.channels > 0 && !grad_input ? a.channels : g.cout) / a.groups;
  return g;
}

// ---- Conv ----

// Checks x and w against the attributes; returns the output spatial extents.
Shape conv_out_spatial(const char* op, const ConvAttrs& a, const Shape& x, const Shape& w) {
  AS_CHECK(x.size() == 3 || x.size() == 4, op,
           ": x must be [batch, *spatial, channels] with 1 or 2 spatial dims, got ", shape_str(x));
  const size_t sp = x.size() - 2;
  AS_CHECK(w.size() == x.size(), op, ": the kernel ", shape_str(w),
           " must be [*kernel, in/groups, out] for x ", shape_str(x));
  check_spatial(a.strides, sp, "strides", op, 1);
  check_spatial(a.dilations, sp, "dilation_rate", op, 1);
  check_spatial(a.pad_lo, sp, "padding", op, std::numeric_limits<int64_t>::min());
  check_spatial(a.pad_hi, sp, "padding", op, std::numeric_limits<int64_t>::min());
  AS_CHECK(a.groups >= 1, op, ": groups must be at least 1, got ", a.groups);
  Shape out;
  for (size_t i = 0; i < sp; ++i) {
    AS_CHECK(w[i] >= 1, op, ": kernel size must be at least 1, got ", shape_str(w));
    const int64_t span = a.dilations[i] * (w[i] - 1) + 1;
    const int64_t o = out_extent(x[1 + i], a.pad_lo[i], a.pad_hi[i], span, a.strides[i]);
    AS_CHECK(o >= 0, op, ": a kernel spanning ", span, " does not fit spatial dim ", i, " of x ",
             shape_str(x), " with padding ", a.pad_lo[i], "+", a.pad_hi[i]);
    out.push_back(o);
  }
  return out;
}

// Channel counts are checked on global graphs; a device's copy of a grouped
// op with split channels (channels > 0) holds a part of them.
void check_channels(const char* op, const ConvAttrs& a, int64_t cin, const Shape& w) {
  if (a.channels > 0) return;
  const int64_t cig = w[w.size() - 2], cout = w.back();
  AS_CHECK(cin == cig * a.groups, op, ": x has ", cin, " channels but the kernel ", shape_str(w),
           " takes ", cig, " per group x ", a.groups, " groups");
  AS_CHECK(cout % a.groups == 0, op, ": ", cout, " output channels do not split into ", a.groups,
           " groups");
}

ShapeAndType conv_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const Shape& x = input_shape(g, n, 0);
  const Shape& w = input_shape(g, n, 1);
  Shape out{x.empty() ? 0 : x[0]};
  const Shape sp = conv_out_spatial("conv", a, x, w);
  check_channels("conv", a, x.back(), w);
  out.insert(out.end(), sp.begin(), sp.end());
  out.push_back(w.back());
  return {out, DType::F32};
}

// Both gradients take the convolution's output gradient: it must have the
// shape the forward convolution of x by w gives.
void check_conv_output(const char* op, const ConvAttrs& a, const Shape& dy, const Shape& x,
                       const Shape& w) {
  const Shape sp = conv_out_spatial(op, a, x, w);
  AS_CHECK(dy.size() == x.size() && dy[0] == x[0] && dy.back() == w.back() &&
               std::equal(sp.begin(), sp.end(), dy.begin() + 1),
           op, ": dy ", shape_str(dy), " is not the output of x ", shape_str(x), " and kernel ",
           shape_str(w));
}

ShapeAndType conv_grad_input_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const Shape& dy = input_shape(g, n, 0);
  const Shape& w = input_shape(g, n, 1);
  const Shape& x = a.shape;
  check_conv_output("conv_grad_input", a, dy, x, w);
  if (a.channel_offset == 0 && a.channels == 0) check_channels("conv_grad_input", a, x.back(), w);
  return {x, DType::F32};
}

ShapeAndType conv_grad_filter_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const Shape& x = input_shape(g, n, 0);
  const Shape& dy = input_shape(g, n, 1);
  const Shape& w = a.shape;
  check_conv_output("conv_grad_filter", a, dy, x, w);
  check_channels("conv_grad_filter", a, x.back(), w);
  return {w, DType::F32};
}

void conv_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const ConvGeometry g = geometry(a, in[0]->shape(), in[1]->shape(), out.shape());
  conv_forward(g, a.channel_offset, in[0]->f32(), in[1]->f32(), out.f32());
}
void conv_grad_input_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                            const KernelContext&) {
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const ConvGeometry g = geometry(a, out.shape(), in[1]->shape(), in[0]->shape(), true);
  conv_backward_input(g, a.channel_offset, in[0]->f32(), in[1]->f32(), out.f32());
}
void conv_grad_filter_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                             const KernelContext&) {
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const ConvGeometry g = geometry(a, in[0]->shape(), out.shape(), in[1]->shape());
  conv_backward_filter(g, a.channel_offset, in[0]->f32(), in[1]->f32(), out.f32());
}

// d conv(x, w) = conv_grad_input(dy, w) dx + conv_grad_filter(x, dy) dw; the
// gradients of those are convolutions again, so every order is defined.
std::vector<Value> conv_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  ConvAttrs a = n.attr<ConvAttrs>();
  Value x = g.value(n.inputs[0]), w = g.value(n.inputs[1]);
  ConvAttrs ax = a, aw = a;
  ax.shape = x.shape();
  aw.shape = w.shape();
  return {g.add(Op::ConvGradInput, {dy, w}, ax), g.add(Op::ConvGradFilter, {x, dy}, aw)};
}
std::vector<Value> conv_grad_input_vjp(Graph& g, int id, Value dx) {
  const Node& n = g.node(id);
  ConvAttrs a = n.attr<ConvAttrs>();
  Value dy = g.value(n.inputs[0]), w = g.value(n.inputs[1]);
  ConvAttrs aw = a;
  aw.shape = w.shape();
  return {g.add(Op::Conv, {dx, w}, a), g.add(Op::ConvGradFilter, {dx, dy}, aw)};
}
std::vector<Value> conv_grad_filter_vjp(Graph& g, int id, Value dw) {
  const Node& n = g.node(id);
  ConvAttrs a = n.attr<ConvAttrs>();
  Value x = g.value(n.inputs[0]), dy = g.value(n.inputs[1]);
  ConvAttrs ax = a;
  ax.shape = x.shape();
  return {g.add(Op::ConvGradInput, {dy, dw}, ax), g.add(Op::Conv, {x, dw}, a)};
}

// ---- loops ----
//
// The three convolution ops share their loops: batch, the output's spatial
// positions, output channels, input channels, kernel taps. What differs is
// which of them each op's tensors index and which are reductions.

struct ConvLoops {
  LoopNest nest;
  int batch = -1, cout = -1, cin = -1;
  std::vector<int> out_sp, in_sp, taps;
};

int spatial_dims(const Shape& x) {
  return static_cast<int>(x.size()) - 2;
}

// Spatial dims of the input x: read through a window of the output's
// positions (a halo when split).
std::vector<int> halo_dims(LoopNest& nest, int input, const std::vector<int>& loops) {
  std::vector<int> dims;
  for (size_t i = 0; i < loops.size(); ++i) {
    nest.halos.push_back({input, static_cast<int>(i) + 1});
    dims.push_back(loops[i]);
  }
  return dims;
}

std::vector<int> concat(std::initializer_list<std::vector<int>> parts) {
  std::vector<int> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

LoopNest conv_loops(const Graph& g, const Node& n) {
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const Shape& x = input_shape(g, n, 0);
  const Shape& w = input_shape(g, n, 1);
  const int sp = spatial_dims(x);
  LoopNest nest;
  const int b = nest.add({x[0]});
  std::vector<int> o, k;
  for (int i = 0; i < sp; ++i) o.push_back(nest.add({n.shape[1 + i]}));
  const int co = nest.add({w.back()});
  // Grouped: an input channel reads the output channels of its group only,
  // so the input channels stay whole (a device's output channels read
  // whichever groups they belong to).
  const bool grouped = a.groups > 1;
  const int ci = nest.add({w[sp], grouped ? Loop::Kind::Whole : Loop::Kind::Reduction});
  for (int i = 0; i < sp; ++i) k.push_back(nest.add({w[i], Loop::Kind::Whole}));
  nest.inputs = {concat({{b}, halo_dims(nest, 0, o), {grouped ? -1 : ci}}), concat({k, {ci, co}})};
  nest.output = concat({{b}, o, {co}});
  return nest;
}

LoopNest conv_grad_input_loops(const Graph& g, const Node& n) {
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const Shape& dy = input_shape(g, n, 0);
  const Shape& w = input_shape(g, n, 1);
  const Shape& x = n.shape;
  const int sp = spatial_dims(x);
  LoopNest nest;
  const int b = nest.add({x[0]});
  std::vector<int> s, k;
  for (int i = 0; i < sp; ++i) s.push_back(nest.add({x[1 + i]}));
  const bool grouped = a.groups > 1;
  // Grouped: dx's channels split only one per group (depthwise), each then
  // reading its own group's output channels, which stay whole.
  const Loop::Kind cin_kind = grouped && w[sp] > 1 ? Loop::Kind::Whole : Loop::Kind::Parallel;
  const int ci = nest.add({x.back(), cin_kind});
  const int co = nest.add({dy.back(), grouped ? Loop::Kind::Whole : Loop::Kind::Reduction});
  for (int i = 0; i < sp; ++i) k.push_back(nest.add({w[i], Loop::Kind::Whole}));
  nest.inputs = {concat({{b}, halo_dims(nest, 0, s), {co}}), concat({k, {grouped ? -1 : ci, co}})};
  nest.output = concat({{b}, s, {ci}});
  return nest;
}

LoopNest conv_grad_filter_loops(const Graph& g, const Node& n) {
  const ConvAttrs& a = n.attr<ConvAttrs>();
  const Shape& x = input_shape(g, n, 0);
  const Shape& dy = input_shape(g, n, 1);
  const Shape& w = n.shape;
  const int sp = spatial_dims(x);
  LoopNest nest;
  const int b = nest.add({x[0], Loop::Kind::Reduction});
  std::vector<int> o, k;
  for (int i = 0; i < sp; ++i) o.push_back(nest.add({dy[1 + i], Loop::Kind::Reduction}));
  const int co = nest.add({w.back()});
  const bool grouped = a.groups > 1;
  const int ci = nest.add({w[sp], grouped ? Loop::Kind::Whole : Loop::Kind::Parallel});
  for (int i = 0; i < sp; ++i) k.push_back(nest.add({w[i], Loop::Kind::Whole}));
  nest.inputs = {concat({{b}, halo_dims(nest, 0, o), {grouped ? -1 : ci}}), concat({{b}, o, {co}})};
  nest.output = concat({k, {ci, co}});
  return nest;
}

// The rows of x that positions [begin, end) of the output read (Conv,
// ConvGradFilter: x is input 0; with `from_dx`, ConvGradInput: the rows of
// dy that rows [begin, end) of dx take).
std::pair<int64_t, int64_t> conv_window(const ConvAttrs& a, int i, int64_t k, int64_t begin,
                                        int64_t end, bool from_dx) {
  const int64_t s = a.strides[i], lo = a.pad_lo[i], span = a.dilations[i] * (k - 1) + 1;
  if (end <= begin) return {begin, begin};
  if (!from_dx) return {begin * s - lo, (end - 1) * s - lo + span};
  return {ceil_div(begin + lo - span + 1, s), floor_div(end - 1 + lo, s) + 1};
}

// Conv, ConvGradInput: the kernel is input 1; ConvGradFilter: its output.
const Shape& kernel_shape(const Node& n, const std::vector<Shape>& inputs) {
  return n.op == Op::ConvGradFilter ? n.shape : inputs[1];
}

std::pair<int64_t, int64_t> conv_op_window(const Graph& g, const Node& n, int, int dim,
                                           int64_t begin, int64_t end) {
  const Shape& w = n.op == Op::ConvGradFilter ? n.shape : input_shape(g, n, 1);
  return conv_window(n.attr<ConvAttrs>(), dim - 1, w[dim - 1], begin, end,
                     n.op == Op::ConvGradInput);
}

// ---- localize: a device's band of the output reads a band of the input ----

struct Band {
  int64_t origin = 0, extent = 0;
};

Band block_band(const LocalizeInfo& info, const Sharding& s, const Shape& global, int d) {
  return {s.offsets(global, info.mesh, info.device)[d],
          s.local_shape(global, info.mesh, info.device)[d]};
}

// The rows of an input of extent `extent` a device holds: its window of
// `loop` (clipped as the partitioner clips it) when split, else all.
Band window_band(bool split, std::pair<int64_t, int64_t> window, int64_t extent) {
  if (!split) return {0, extent};
  const int64_t lo = std::clamp<int64_t>(window.first, 0, extent);
  const int64_t hi = std::clamp<int64_t>(window.second, lo, extent);
  return {lo, hi - lo};
}

// y[o] reads x[o * s - lo + k * d] globally; locally, with x's band at
// x.origin and y's at y.origin, x_local[o_local * s - lo' + k * d] where
// lo' = lo + x.origin - y.origin * s, and pad_hi' makes the local op's
// output extent y.extent.
void shift_padding(int64_t& lo, int64_t& hi, int64_t stride, int64_t span, Band x, Band y) {
  lo += x.origin - y.origin * stride;
  hi = (y.extent - 1) * stride + span - x.extent - lo;
}

void conv_localize(OpAttrs& attrs, const LocalizeInfo& info) {
  ConvAttrs& a = std::get<ConvAttrs>(attrs);
  const ConvAttrs global = std::get<ConvAttrs>(info.global.attrs);
  const Node& n = info.global;
  const ShardDecision& dec = info.decision;
  const Shape& k = kernel_shape(n, info.input_shapes);
  const bool grad_input = n.op == Op::ConvGradInput;
  const Shape& x = grad_input ? n.shape : info.input_shapes[0];
  const int sp = spatial_dims(x);
  for (int i = 0; i < sp; ++i) {
    const int d = i + 1;
    const int64_t span = global.dilations[i] * (k[i] - 1) + 1;
    Band xb, yb;
    if (n.op == Op::Conv) {
      yb = block_band(info, dec.output, n.shape, d);
      xb = window_band(dec.inputs[0].dims[d] >= 0,
                       conv_window(global, i, k[i], yb.origin, yb.origin + yb.extent, false), x[d]);
    } else if (grad_input) {
      xb = block_band(info, dec.output, n.shape, d);
      yb = window_band(dec.inputs[0].dims[d] >= 0,
                       conv_window(global, i, k[i], xb.origin, xb.origin + xb.extent, true),
                       info.input_shapes[0][d]);
    } else {
      yb = block_band(info, dec.inputs[1], info.input_shapes[1], d);
      xb = window_band(dec.inputs[0].dims[d] >= 0,
                       conv_window(global, i, k[i], yb.origin, yb.origin + yb.extent, false), x[d]);
    }
    a.pad_lo[i] = global.pad_lo[i];
    shift_padding(a.pad_lo[i], a.pad_hi[i], global.strides[i], span, xb, yb);
  }
  if (n.op != Op::Conv) a.shape = info.local_output_shape();
  // A grouped op with its channels split: where its channels start.
  if (global.groups > 1 && dec.output.dims.back() >= 0) {
    a.channel_offset = dec.output.offsets(n.shape, info.mesh, info.device).back();
    a.channels = n.shape.back();
  }
}

// Rules: the loops say everything (halo dims included).
ShardDecision loops_rule(const ShardQuery& q) {
  return follow_inputs(op_def(q.node.op).loops(q.graph, q.node), q.inputs);
}

// Each output element costs a multiply-add per tap and input channel of its
// group, for the forward and both gradients; im2col writes and BLAS packs
// a column matrix of that many elements per output row.
OpCost conv_cost(const Node& n, const CostShapes& s) {
  const Shape& w = n.op == Op::ConvGradFilter ? s.output : s.inputs[1];
  const Shape& y = n.op == Op::Conv ? s.output : s.inputs[n.op == Op::ConvGradInput ? 0 : 1];
  const double per_row = elements(w) / double(std::max<int64_t>(1, w.back()));
  const double rows = elements(y) / double(std::max<int64_t>(1, y.back()));
  double bytes = elements(s.output);
  for (const Shape& in : s.inputs) bytes += elements(in);
  OpCost c{2 * elements(y) * per_row, 4 * bytes, true};
  c.packed_bytes = 4 * rows * per_row;
  return c;
}

// ---- Pool and PoolGrad ----

ConvGeometry pool_geometry(const PoolAttrs& a, const Shape& x, const Shape& y) {
  const size_t sp = x.size() - 2;
  ConvGeometry g;
  g.batch = x[0];
  g.in_h = sp == 2 ? x[1] : 1;
  g.in_w = x[sp];
  g.out_h = sp == 2 ? y[1] : 1;
  g.out_w = y[sp];
  g.k_h = sp == 2 ? a.window[0] : 1;
  g.k_w = a.window[sp - 1];
  g.stride_h = sp == 2 ? a.strides[0] : 1;
  g.stride_w = a.strides[sp - 1];
  g.pad_h = sp == 2 ? a.pad_lo[0] : 0;
  g.pad_w = a.pad_lo[sp - 1];
  g.cin = g.cout = x.back();
  return g;
}

ShapeAndType pool_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const PoolAttrs& a = n.attr<PoolAttrs>();
  const Shape& x = input_shape(g, n, 0);
  AS_CHECK(x.size() == 3 || x.size() == 4,
           "pool: x must be [batch, *spatial, channels] with 1 or 2 spatial dims, got ",
           shape_str(x));
  const size_t sp = x.size() - 2;
  check_spatial(a.window, sp, "pool_size", "pool", 1);
  check_spatial(a.strides, sp, "strides", "pool", 1);
  check_spatial(a.pad_lo, sp, "padding", "pool", std::numeric_limits<int64_t>::min());
  check_spatial(a.pad_hi, sp, "padding", "pool", std::numeric_limits<int64_t>::min());
  Shape out{x[0]};
  for (size_t i = 0; i < sp; ++i) {
    const int64_t o = out_extent(x[1 + i], a.pad_lo[i], a.pad_hi[i], a.window[i], a.strides[i]);
    AS_CHECK(o >= 0, "pool: a window of ", a.window[i], " does not fit spatial dim ", i, " of x ",
             shape_str(x));
    out.push_back(o);
  }
  out.push_back(x.back());
  return {out, DType::F32};
}

ShapeAndType pool_grad_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& x = input_shape(g, n, 0);
  Node fwd{Op::Pool, {n.inputs[0]}, {}, DType::F32, n.attrs};
  AS_CHECK(pool_infer(g, fwd).shape == input_shape(g, n, 1), "pool_grad: dy ",
           shape_str(input_shape(g, n, 1)), " is not the pooling of x ", shape_str(x));
  return {x, DType::F32};
}

void pool_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const PoolAttrs& a = n.attr<PoolAttrs>();
  pool_forward(pool_geometry(a, in[0]->shape(), out.shape()), a.max, in[0]->f32(), out.f32());
}
void pool_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  const PoolAttrs& a = n.attr<PoolAttrs>();
  pool_backward(pool_geometry(a, in[0]->shape(), in[1]->shape()), a.max, in[0]->f32(), in[1]->f32(),
                out.f32());
}
std::vector<Value> pool_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {g.add(Op::PoolGrad, {g.value(n.inputs[0]), dy}, n.attrs)};
}

// Batch, output positions and channels; a split output row reads a window
// of input rows (a halo).
LoopNest pool_loops(const Graph& g, const Node& n) {
  const Shape& x = input_shape(g, n, 0);
  const int sp = spatial_dims(x);
  LoopNest nest;
  const int b = nest.add({x[0]});
  std::vector<int> o;
  for (int i = 0; i < sp; ++i) o.push_back(nest.add({n.shape[1 + i]}));
  const int c = nest.add({x.back()});
  nest.inputs = {concat({{b}, halo_dims(nest, 0, o), {c}})};
  nest.output = concat({{b}, o, {c}});
  return nest;
}
// The gradient keeps its spatial dims whole (a maximum's position may sit
// in a neighbour's rows): batch and channels split.
LoopNest pool_grad_loops(const Graph& g, const Node& n) {
  const Shape& x = input_shape(g, n, 0);
  const Shape& dy = input_shape(g, n, 1);
  const int sp = spatial_dims(x);
  LoopNest nest;
  const int b = nest.add({x[0]});
  std::vector<int> s, o;
  for (int i = 0; i < sp; ++i) s.push_back(nest.add({x[1 + i], Loop::Kind::Whole}));
  for (int i = 0; i < sp; ++i) o.push_back(nest.add({dy[1 + i], Loop::Kind::Whole}));
  const int c = nest.add({x.back()});
  nest.inputs = {concat({{b}, s, {c}}), concat({{b}, o, {c}})};
  nest.output = concat({{b}, s, {c}});
  return nest;
}

std::pair<int64_t, int64_t> pool_window(const Graph&, const Node& n, int, int dim, int64_t begin,
                                        int64_t end) {
  const PoolAttrs& a = n.attr<PoolAttrs>();
  const int i = dim - 1;
  if (end <= begin) return {begin, begin};
  return {begin * a.strides[i] - a.pad_lo[i], (end - 1) * a.strides[i] - a.pad_lo[i] + a.window[i]};
}

void pool_localize(OpAttrs& attrs, const LocalizeInfo& info) {
  if (info.global.op != Op::Pool) return;
  PoolAttrs& a = std::get<PoolAttrs>(attrs);
  const PoolAttrs global = std::get<PoolAttrs>(info.global.attrs);
  const Shape& x = info.input_shapes[0];
  for (int i = 0; i < spatial_dims(x); ++i) {
    const int d = i + 1;
    const Band yb = block_band(info, info.decision.output, info.global.shape, d);
    Graph none;
    const Band xb =
        window_band(info.decision.inputs[0].dims[d] >= 0,
                    pool_window(none, info.global, 0, d, yb.origin, yb.origin + yb.extent), x[d]);
    a.pad_lo[i] = global.pad_lo[i];
    shift_padding(a.pad_lo[i], a.pad_hi[i], global.strides[i], global.window[i], xb, yb);
  }
}

OpCost pool_cost(const Node& n, const CostShapes& s) {
  const PoolAttrs& a = n.attr<PoolAttrs>();
  double window = 1;
  for (int64_t w : a.window) window *= double(w);
  const double y = n.op == Op::Pool ? elements(s.output) : elements(s.inputs[1]);
  double bytes = elements(s.output);
  for (const Shape& in : s.inputs) bytes += elements(in);
  return {y * window * (n.op == Op::Pool ? 1 : 2), 4 * bytes, false};
}

// ---- Pad ----

ShapeAndType pad_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const PadAttrs& a = n.attr<PadAttrs>();
  const Shape& x = input_shape(g, n, 0);
  AS_CHECK(a.lo.size() == x.size() && a.hi.size() == x.size(), "pad: needs ", x.size(),
           " before and after counts for ", shape_str(x), ", got ", a.lo.size(), " and ",
           a.hi.size());
  Shape out = x;
  for (size_t d = 0; d < x.size(); ++d) {
    out[d] = x[d] + a.lo[d] + a.hi[d];
    AS_CHECK(out[d] >= 0, "pad: cropping ", -a.lo[d], " and ", -a.hi[d], " from dim ", d, " of ",
             shape_str(x), " leaves nothing");
  }
  return {out, input_dtype(g, n, 0)};
}

void pad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  if (out.shape().empty()) {
    out.f32()[0] = in[0]->f32()[0];
    return;
  }
  pad_forward(in[0]->shape(), out.shape(), n.attr<PadAttrs>().lo, in[0]->f32(), out.f32());
}

std::vector<Value> pad_vjp(Graph& g, int id, Value dy) {
  const PadAttrs& a = g.node(id).attr<PadAttrs>();
  std::vector<int64_t> lo, hi;
  for (size_t d = 0; d < a.lo.size(); ++d) lo.push_back(-a.lo[d]), hi.push_back(-a.hi[d]);
  return {ops::pad(dy, lo, hi)};
}

// A dim padded or cropped stays whole; the others split freely.
LoopNest pad_loops(const Graph& g, const Node& n) {
  const PadAttrs& a = n.attr<PadAttrs>();
  const Shape& x = input_shape(g, n, 0);
  LoopNest nest;
  std::vector<int> in;
  for (size_t d = 0; d < x.size(); ++d) {
    const bool moved = a.lo[d] != 0 || a.hi[d] != 0;
    const int l = nest.add({n.shape[d], moved ? Loop::Kind::Whole : Loop::Kind::Parallel});
    nest.output.push_back(l);
    in.push_back(moved ? -1 : l);
  }
  nest.inputs = {in};
  return nest;
}

OpCost pad_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 0);
}

}  // namespace

void register_vision_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Conv)] = {.name = "conv",
                         .infer = conv_infer,
                         .kernel = conv_kernel,
                         .vjp = conv_vjp,
                         .shard = loops_rule,
                         .localize = conv_localize,
                         .loops = conv_loops,
                         .cost = conv_cost,
                         .window = conv_op_window};
  t[size_t(Op::ConvGradInput)] = {.name = "conv_grad_input",
                                  .infer = conv_grad_input_infer,
                                  .kernel = conv_grad_input_kernel,
                                  .vjp = conv_grad_input_vjp,
                                  .shard = loops_rule,
                                  .localize = conv_localize,
                                  .loops = conv_grad_input_loops,
                                  .cost = conv_cost,
                                  .window = conv_op_window};
  t[size_t(Op::ConvGradFilter)] = {.name = "conv_grad_filter",
                                   .infer = conv_grad_filter_infer,
                                   .kernel = conv_grad_filter_kernel,
                                   .vjp = conv_grad_filter_vjp,
                                   .shard = loops_rule,
                                   .localize = conv_localize,
                                   .loops = conv_grad_filter_loops,
                                   .cost = conv_cost,
                                   .window = conv_op_window,
                                   .makes_weight_gradient = true};
  t[size_t(Op::Pool)] = {.name = "pool",
                         .infer = pool_infer,
                         .kernel = pool_kernel,
                         .vjp = pool_vjp,
                         .shard = loops_rule,
                         .localize = pool_localize,
                         .loops = pool_loops,
                         .cost = pool_cost,
                         .window = pool_window};
  t[size_t(Op::PoolGrad)] = {.name = "pool_grad",
                             .infer = pool_grad_infer,
                             .kernel = pool_grad_kernel,
                             .shard = loops_rule,
                             .loops = pool_grad_loops,
                             .cost = pool_cost};
  t[size_t(Op::Pad)] = {.name = "pad",
                        .infer = pad_infer,
                        .kernel = pad_kernel,
                        .vjp = pad_vjp,
                        .shard = loops_rule,
                        .loops = pad_loops,
                        .linearity = Linearity::Unary,
                        .cost = pad_cost};
}

namespace ops {

Value conv(Value x, Value w, ConvAttrs attrs) {
  attrs.shape.clear();
  return x.graph->add(Op::Conv, {x, w}, std::move(attrs));
}
Value conv_grad_input(Value dy, Value w, ConvAttrs attrs) {
  return dy.graph->add(Op::ConvGradInput, {dy, w}, std::move(attrs));
}
Value pool(Value x, PoolAttrs attrs) {
  return x.graph->add(Op::Pool, {x}, std::move(attrs));
}
Value pad(Value x, std::vector<int64_t> lo, std::vector<int64_t> hi) {
  return x.graph->add(Op::Pad, {x}, PadAttrs{std::move(lo), std::move(hi)});
}
std::pair<int64_t, int64_t> same_padding(int64_t in, int64_t window, int64_t stride,
                                         int64_t dilation) {
  const int64_t span = dilation * (window - 1) + 1;
  const int64_t out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>(0, (out - 1) * stride + span - in);
  return {total / 2, total - total / 2};
}

}  // namespace ops
}  // namespace autoshard
