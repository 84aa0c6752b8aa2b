// Parameter, Input and Constant: the leaves of a Graph.
#include <algorithm>

#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

ShapeAndType leaf_infer(const Graph&, const Node& n) {
  expect_inputs(n, 0);
  return {n.attrs.ints, static_cast<DType>(n.attrs.i)};
}

void bound_by_executor(const Node& n, std::span<Tensor* const>, Tensor&, const KernelContext&) {
  fail("internal: ", op_def(n.op).name, " ", n.attrs.text, " has no value bound");
}

ShapeAndType constant_infer(const Graph&, const Node& n) {
  expect_inputs(n, 0);
  return {n.attrs.ints, DType::F32};
}

void constant_kernel(const Node& n, std::span<Tensor* const>, Tensor& out, const KernelContext&) {
  std::fill_n(out.f32(), out.numel(), static_cast<float>(n.attrs.f));
}

ShapeAndType iota_infer(const Graph&, const Node& n) {
  expect_inputs(n, 0);
  check(!n.attrs.ints.empty(), "iota needs at least one axis");
  return {n.attrs.ints, DType::I32};
}

void iota_kernel(const Node& n, std::span<Tensor* const>, Tensor& out, const KernelContext&) {
  const int64_t len = n.attrs.ints.back();
  for (int64_t i = 0; i < out.numel(); ++i) out.i32()[i] = static_cast<int32_t>(i % len);
}

}  // namespace

void register_basic_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Parameter)] = {"parameter", leaf_infer, bound_by_executor};
  t[size_t(Op::Input)] = {"input", leaf_infer, bound_by_executor};
  t[size_t(Op::Constant)] = {"constant", constant_infer, constant_kernel};
  t[size_t(Op::Iota)] = {"iota", iota_infer, iota_kernel};
}

}  // namespace autoshard
