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
  AS_CHECK(numel(in) == numel(n.attrs.ints), "cannot reshape ", shape_str(in), " to ",
        shape_str(n.attrs.ints));
  return {n.attrs.ints, input_dtype(g, n, 0)};
}

// The executor makes the output share the input's storage; nothing to do.
void reshape_kernel(const Node&, std::span<Tensor* const>, Tensor&, const KernelContext&) {}

std::vector<Value> reshape_vjp(Graph& g, int id, Value dy) {
  return {ops::reshape(dy, input_shape(g, g.node(id), 0))};
}

ShapeAndType transpose_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& in = input_shape(g, n, 0);
  AS_CHECK(n.attrs.ints.size() == in.size(), "transpose: permutation of length ", n.attrs.ints.size(),
        " for rank ", in.size());
  std::vector<bool> seen(in.size(), false);
  Shape out;
  for (int64_t p : n.attrs.ints) {
    AS_CHECK(p >= 0 && p < static_cast<int64_t>(in.size()) && !seen[p], "transpose: bad permutation");
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
  for (size_t i = 0; i < r; ++i) st[i] = xs[n.attrs.ints[i]];
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
  const std::vector<int64_t> perm = g.node(id).attrs.ints;
  std::vector<int64_t> inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {ops::transpose(dy, inverse)};
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
  Sharding res{std::vector<int>(out.size(), -1), req.partial};
  size_t i = 0, o = 0;
  while (i < in.size() || o < out.size()) {
    // Skip size-1 dims: they carry no data and stay unsplit.
    if (i < in.size() && in[i] == 1) {
      ++i;
      continue;
    }
    if (o < out.size() && out[o] == 1) {
      ++o;
      continue;
    }
    if (i >= in.size() || o >= out.size()) break;
    // Grow a group until both sides cover the same number of elements.
    size_t i0 = i, o0 = o;
    int64_t pi = in[i++], po = out[o++];
    while (pi != po) {
      if (pi < po)
        pi *= in[i++];
      else
        po *= out[o++];
    }
    if (i - i0 == 1 && o - o0 == 1) {
      req.dims[i0] = q.inputs[0].dims[i0];
      res.dims[o0] = req.dims[i0];
    }
  }
  return {{req}, res};
}

void reshape_localize(Attrs& a, const LocalizeInfo& info) {
  a.ints = info.local_output_shape();
}

ShardDecision transpose_rule(const ShardQuery& q) {
  Sharding out{{}, q.inputs[0].partial};
  for (int64_t p : q.node.attrs.ints) out.dims.push_back(q.inputs[0].dims[p]);
  return {{q.inputs[0]}, out};
}

}  // namespace

void register_shape_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Reshape)] = {.name = "reshape",
                            .infer = reshape_infer,
                            .kernel = reshape_kernel,
                            .vjp = reshape_vjp,
                            .aliases_input = true,
                            .shard = reshape_rule,
                            .localize = reshape_localize};
  t[size_t(Op::Transpose)] = {.name = "transpose",
                              .infer = transpose_infer,
                              .kernel = transpose_kernel,
                              .vjp = transpose_vjp,
                              .shard = transpose_rule};
}

}  // namespace autoshard
