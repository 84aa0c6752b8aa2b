// Reshape (a view), Transpose and Concat (copies).
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

ShapeAndType reshape_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& in = input_shape(g, n, 0);
  const Shape& to = n.attr<ShapeAttrs>().shape;
  AS_CHECK(numel(in) == numel(to), "cannot reshape ", shape_str(in), " to ", shape_str(to));
  return {to, input_dtype(g, n, 0)};
}

// The executor makes the output share the input's storage; nothing to do.
void reshape_kernel(const Node&, std::span<Tensor* const>, Tensor&, const KernelContext&) {}

std::vector<Value> reshape_vjp(Graph& g, int id, Value dy) {
  return {ops::reshape(dy, input_shape(g, g.node(id), 0))};
}

ShapeAndType transpose_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& in = input_shape(g, n, 0);
  const std::vector<int64_t>& perm = n.attr<PermAttrs>().perm;
  AS_CHECK(perm.size() == in.size(), "transpose: permutation of length ", perm.size(), " for rank ",
           in.size());
  std::vector<bool> seen(in.size(), false);
  Shape out;
  for (int64_t p : perm) {
    AS_CHECK(p >= 0 && p < static_cast<int64_t>(in.size()) && !seen[p],
             "transpose: bad permutation");
    seen[p] = true;
    out.push_back(in[p]);
  }
  return {out, input_dtype(g, n, 0)};
}

void transpose_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  const Tensor& x = *in[0];
  const size_t r = x.shape().size();
  std::vector<int64_t> xs = strides_of(x.shape()), st(r), idx(r, 0);
  const std::vector<int64_t>& perm = n.attr<PermAttrs>().perm;
  for (size_t i = 0; i < r; ++i) st[i] = xs[perm[i]];
  const auto* src = static_cast<const uint32_t*>(x.raw());  // f32 and i32 are both 4 bytes
  auto* dst = static_cast<uint32_t*>(out.raw());
  int64_t off = 0;
  for (int64_t k = 0; k < out.numel(); ++k) {
    dst[k] = src[off];
    for (size_t d = r; d-- > 0;) {
      off += st[d];
      if (++idx[d] < out.shape()[d]) break;
      off -= st[d] * out.shape()[d];
      idx[d] = 0;
    }
  }
}

std::vector<Value> transpose_vjp(Graph& g, int id, Value dy) {
  const std::vector<int64_t> perm = g.node(id).attr<PermAttrs>().perm;
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {ops::transpose(dy, inverse)};
}

// The groups of dimensions a reshape merges or splits: pairs of
// [begin, end) ranges of input and output dims covering the same elements.
// Size-1 dims belong to no group.
struct ReshapeGroup {
  size_t in_begin, in_end, out_begin, out_end;
};
std::vector<ReshapeGroup> reshape_groups(const Shape& in, const Shape& out) {
  std::vector<ReshapeGroup> groups;
  size_t i = 0, o = 0;
  while (i < in.size() || o < out.size()) {
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (o < out.size() && out[o] == 1) {
      ++o;
      continue;
    }
    if (i >= in.size() || o >= out.size()) break;
    ReshapeGroup grp{i, 0, o, 0};
    int64_t pi = in[i++], po = out[o++];
    while (pi != po) {
      if (pi < po)
        pi *= in[i++];
      else
        po *= out[o++];
    }
    grp.in_end = i, grp.out_end = o;
    groups.push_back(grp);
  }
  return groups;
}

// Reshape keeps the split of a dimension that survives unchanged (same size,
// alone in its group of merged or split dimensions); every other dimension is
// gathered, since array_split blocks of a merged dimension are not blocks of
// its parts.
ShardDecision reshape_rule(const ShardQuery& q) {
  const Shape& in = input_shape(q.graph, q.node, 0);
  const Shape& out = q.node.shape;
  Sharding req = Sharding::replicated(in.size());
  req.partial = q.inputs[0].partial;
  req.partial_op = q.inputs[0].partial_op;
  Sharding res = req;
  res.dims.assign(out.size(), -1);
  for (const ReshapeGroup& grp : reshape_groups(in, out))
    if (grp.in_end - grp.in_begin == 1 && grp.out_end - grp.out_begin == 1) {
      req.dims[grp.in_begin] = q.inputs[0].dims[grp.in_begin];
      res.dims[grp.out_begin] = req.dims[grp.in_begin];
    }
  return {{req}, res};
}

void reshape_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<ShapeAttrs>(a).shape = info.local_output_shape();
}

// A dimension that passes through unchanged (a group of one input and one
// output dim) is a parallel loop; merged or split dims stay whole, since
// array_split blocks of a merged dimension are not blocks of its parts.
LoopNest reshape_loops(const Graph& g, const Node& n) {
  const Shape& in = input_shape(g, n, 0);
  LoopNest nest;
  std::vector<int> in_dims(in.size(), -1);
  nest.output.assign(n.shape.size(), -1);
  for (const ReshapeGroup& grp : reshape_groups(in, n.shape)) {
    const bool single = grp.in_end - grp.in_begin == 1 && grp.out_end - grp.out_begin == 1;
    const int l = nest.add({in[grp.in_begin], single ? Loop::Kind::Parallel : Loop::Kind::Whole});
    if (single) in_dims[grp.in_begin] = nest.output[grp.out_begin] = l;
  }
  nest.inputs.push_back(in_dims);
  return nest;
}

ShardDecision transpose_rule(const ShardQuery& q) {
  Sharding out = q.inputs[0];
  out.dims.clear();
  for (int64_t p : q.node.attr<PermAttrs>().perm) out.dims.push_back(q.inputs[0].dims[p]);
  return {{q.inputs[0]}, out};
}

LoopNest transpose_loops(const Graph& g, const Node& n) {
  const Shape& in = input_shape(g, n, 0);
  LoopNest nest;
  std::vector<int> dims;
  for (int64_t d : in) dims.push_back(nest.add({d}));
  nest.inputs.push_back(dims);
  for (int64_t p : n.attr<PermAttrs>().perm) nest.output.push_back(dims[p]);
  return nest;
}

// ---- Concat ----

ShapeAndType concat_infer(const Graph& g, const Node& n) {
  AS_CHECK(!n.inputs.empty(), "concat: needs at least one input");
  const Shape& first = input_shape(g, n, 0);
  const int64_t axis = n.attr<ConcatAttrs>().axis;
  AS_CHECK(axis >= 0 && axis < static_cast<int64_t>(first.size()), "concat: axis ", axis, " of ",
           shape_str(first));
  Shape out = first;
  out[axis] = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Shape s = input_shape(g, n, static_cast<int>(i));
    AS_CHECK(input_dtype(g, n, int(i)) == input_dtype(g, n, 0), "concat: input ", i, " is ",
             dtype_name(input_dtype(g, n, int(i))), " where input 0 is ",
             dtype_name(input_dtype(g, n, 0)), " (convert one first)");
    AS_CHECK(s.size() == first.size(), "concat: input ", i, " ", shape_str(s), " is not of rank ",
             first.size(), " like input 0 ", shape_str(first));
    out[axis] += s[axis];
    s[axis] = first[axis];
    AS_CHECK(s == first, "concat: input ", i, " ", shape_str(input_shape(g, n, int(i))),
             " differs from ", shape_str(first), " off the axis ", axis);
  }
  return {out, input_dtype(g, n, 0)};
}

// The output is `outer` slabs (the dims before the axis), each the inputs'
// slabs one after another: one copy per (slab, input), spread over threads.
void concat_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const int64_t axis = n.attr<ConcatAttrs>().axis, parts = static_cast<int64_t>(in.size());
  const Shape& s = out.shape();
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[d];
  if (outer == 0 || out.numel() == 0) return;
  const int64_t slab = static_cast<int64_t>(out.nbytes()) / outer;  // bytes per outer index
  std::vector<int64_t> bytes(parts), offset(parts);
  for (int64_t i = 0, at = 0; i < parts; ++i) {
    bytes[i] = static_cast<int64_t>(in[i]->nbytes()) / outer;
    offset[i] = at;
    at += bytes[i];
  }
  auto* dst = static_cast<char*>(out.raw());
  const int64_t copies = outer * parts;
  parallel_for(copies, grain_for(out.numel() / copies), [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t o = k / parts, i = k % parts;
      std::memcpy(dst + o * slab + offset[i], static_cast<const char*>(in[i]->raw()) + o * bytes[i],
                  size_t(bytes[i]));
    }
  });
}

// Each input's gradient is its crop of dy.
std::vector<Value> concat_vjp(Graph& g, int id, Value dy) {
  const int64_t axis = g.node(id).attr<ConcatAttrs>().axis;
  std::vector<int64_t> sizes;
  for (int in : g.node(id).inputs) sizes.push_back(g.value(in).dim(static_cast<int>(axis)));
  std::vector<Value> grads;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    std::vector<int64_t> lo(dy.rank(), 0), hi(dy.rank(), 0);
    lo[axis] = -offset;
    hi[axis] = -(dy.dim(static_cast<int>(axis)) - offset - size);
    grads.push_back(ops::pad(dy, lo, hi));
    offset += size;
  }
  return grads;
}

// The axis stays whole (each input holds a different run of it); every
// other dim is one loop of all inputs and the output, split freely.
LoopNest concat_loops(const Graph&, const Node& n) {
  const int64_t axis = n.attr<ConcatAttrs>().axis;
  LoopNest nest;
  for (size_t d = 0; d < n.shape.size(); ++d)
    nest.output.push_back(
        nest.add({n.shape[d], int64_t(d) == axis ? Loop::Kind::Whole : Loop::Kind::Parallel}));
  std::vector<int> in = nest.output;
  in[axis] = -1;
  nest.inputs.assign(n.inputs.size(), in);
  return nest;
}

ShardDecision concat_rule(const ShardQuery& q) {
  return follow_inputs(concat_loops(q.graph, q.node), q.inputs);
}

// A reshape is a view; a transpose or a concat moves every element once.
OpCost view_cost(const Node&, const CostShapes&) {
  return {};
}
OpCost moved_once_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 0);
}

}  // namespace

void register_shape_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Reshape)] = {.name = "reshape",
                            .infer = reshape_infer,
                            .kernel = reshape_kernel,
                            .vjp = reshape_vjp,
                            .aliases_input = true,
                            .shard = reshape_rule,
                            .localize = reshape_localize,
                            .loops = reshape_loops,
                            .linearity = Linearity::Unary,
                            .cost = view_cost};
  t[size_t(Op::Transpose)] = {.name = "transpose",
                              .infer = transpose_infer,
                              .kernel = transpose_kernel,
                              .vjp = transpose_vjp,
                              .shard = transpose_rule,
                              .loops = transpose_loops,
                              .linearity = Linearity::Unary,
                              .cost = moved_once_cost};
  t[size_t(Op::Concat)] = {.name = "concat",
                           .infer = concat_infer,
                           .kernel = concat_kernel,
                           .vjp = concat_vjp,
                           .shard = concat_rule,
                           .loops = concat_loops,
                           .linearity = Linearity::Sum,
                           .cost = moved_once_cost};
}

namespace ops {

Value concat(const std::vector<Value>& parts, int64_t axis) {
  AS_CHECK(!parts.empty(), "concat: needs at least one input");
  if (parts.size() == 1) return parts[0];
  return parts[0].graph->add(Op::Concat, parts, ConcatAttrs{axis});
}

}  // namespace ops

}  // namespace autoshard
