// Parameter, Input, Constant and Iota: the leaves of a Graph.
#include <algorithm>

#include "autoshard/error.h"
#include "ir/op_def.h"

namespace autoshard {
namespace {

ShapeAndType leaf_infer(const Graph&, const Node& n) {
  expect_inputs(n, 0);
  return {n.leaf().shape, n.leaf().dtype};
}

void bound_by_executor(const Node& n, std::span<Tensor* const>, Tensor&, const KernelContext&) {
  fail("internal: ", op_def(n.op).name, " ", n.leaf().key(), " has no value bound");
}

ShapeAndType constant_infer(const Graph&, const Node& n) {
  expect_inputs(n, 0);
  return {n.attr<FillAttrs>().shape, DType::F32};
}

void constant_kernel(const Node& n, std::span<Tensor* const>, Tensor& out, const KernelContext&) {
  std::fill_n(out.f32(), out.numel(), static_cast<float>(n.attr<FillAttrs>().value));
}

ShapeAndType iota_infer(const Graph&, const Node& n) {
  expect_inputs(n, 0);
  AS_CHECK(!n.attr<IotaAttrs>().shape.empty(), "iota needs at least one axis");
  return {n.attr<IotaAttrs>().shape, DType::I32};
}

void iota_kernel(const Node& n, std::span<Tensor* const>, Tensor& out, const KernelContext&) {
  const int64_t len = n.attr<IotaAttrs>().shape.back();
  for (int64_t i = 0; i < out.numel(); ++i) out.i32()[i] = static_cast<int32_t>(i % len);
}

// Leaves hold this device's block of the value.
void leaf_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<LeafAttrs>(a).shape = info.local_output_shape();
}
void constant_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<FillAttrs>(a).shape = info.local_output_shape();
}
void iota_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<IotaAttrs>(a).shape = info.local_output_shape();
}

// A leaf's every dimension may be split: its sharding is the strategy.
LoopNest leaf_loops(const Graph&, const Node& n) {
  LoopNest nest;
  for (int64_t d : n.shape) nest.output.push_back(nest.add({d}));
  return nest;
}
// Iota counts along its last axis from 0: that axis stays whole.
LoopNest iota_loops(const Graph& g, const Node& n) {
  LoopNest nest = leaf_loops(g, n);
  nest.loops.back().kind = Loop::Kind::Whole;
  return nest;
}

ShardDecision constant_rule(const ShardQuery& q) {
  if (q.hint && q.hint->rank() == static_cast<int>(q.node.shape.size()))
    return {{}, without_partial(*q.hint)};
  return {{}, Sharding::replicated(static_cast<int>(q.node.shape.size()))};
}

// Leaves cost nothing; fills write their output once.
OpCost no_cost(const Node&, const CostShapes&) {
  return {};
}
OpCost fill_cost(const Node&, const CostShapes& s) {
  return {0, elements(s.output) * 4, false};
}

}  // namespace

void register_basic_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Parameter)] = {.name = "parameter",
                              .infer = leaf_infer,
                              .kernel = bound_by_executor,
                              .localize = leaf_localize,
                              .loops = leaf_loops,
                              .cost = no_cost};
  t[size_t(Op::Input)] = {.name = "input",
                          .infer = leaf_infer,
                          .kernel = bound_by_executor,
                          .localize = leaf_localize,
                          .loops = leaf_loops,
                          .cost = no_cost};
  t[size_t(Op::Constant)] = {.name = "constant",
                             .infer = constant_infer,
                             .kernel = constant_kernel,
                             .shard = constant_rule,
                             .localize = constant_localize,
                             .loops = leaf_loops,
                             .cost = fill_cost};
  t[size_t(Op::Iota)] = {.name = "iota",
                         .infer = iota_infer,
                         .kernel = iota_kernel,
                         .localize = iota_localize,
                         .loops = iota_loops,
                         .cost = fill_cost};
}

}  // namespace autoshard
