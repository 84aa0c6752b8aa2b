// Reshape (a view) and Transpose (a copy).
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
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

// A reshape is a view; a transpose moves every element once.
OpCost view_cost(const Node&, const CostShapes&) {
  return {};
}
OpCost transpose_cost(const Node&, const CostShapes& s) {
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
                              .cost = transpose_cost};
}

}  // namespace autoshard
