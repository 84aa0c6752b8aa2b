// Reshape (a view) and Transpose (a copy).
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/ops.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

ShapeAndType reshape_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& in = input_shape(g, n, 0);
  check(numel(in) == numel(n.attrs.ints), "cannot reshape ", shape_str(in), " to ",
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
  check(n.attrs.ints.size() == in.size(), "transpose: permutation of length ",
        n.attrs.ints.size(), " for rank ", in.size());
  std::vector<bool> seen(in.size(), false);
  Shape out;
  for (int64_t p : n.attrs.ints) {
    check(p >= 0 && p < static_cast<int64_t>(in.size()) && !seen[p], "transpose: bad permutation");
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

}  // namespace

void register_shape_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Reshape)] = {"reshape", reshape_infer, reshape_kernel, reshape_vjp, false, true};
  t[size_t(Op::Transpose)] = {"transpose", transpose_infer, transpose_kernel, transpose_vjp};
}

}  // namespace autoshard
