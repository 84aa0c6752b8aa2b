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
  AS_CHECK(!n.attrs.ints.empty(), "iota needs at least one axis");
  return {n.attrs.ints, DType::I32};
}

void iota_kernel(const Node& n, std::span<Tensor* const>, Tensor& out, const KernelContext&) {
  const int64_t len = n.attrs.ints.back();
  for (int64_t i = 0; i < out.numel(); ++i) out.i32()[i] = static_cast<int32_t>(i % len);
}

// Leaves hold this device's block of the value.
void leaf_localize(Attrs& a, const LocalizeInfo& info) {
  a.ints = info.local_output_shape();
}

}  // namespace

void register_basic_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Parameter)] = {.name = "parameter",
                              .infer = leaf_infer,
                              .kernel = bound_by_executor,
                              .localize = leaf_localize};
  t[size_t(Op::Input)] = {
      .name = "input", .infer = leaf_infer, .kernel = bound_by_executor, .localize = leaf_localize};
  t[size_t(Op::Constant)] = {
      .name = "constant", .infer = constant_infer, .kernel = constant_kernel};
  t[size_t(Op::Iota)] = {.name = "iota", .infer = iota_infer, .kernel = iota_kernel};
}

}  // namespace autoshard
