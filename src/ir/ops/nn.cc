// Fused neural-network primitives: softmax, normalisation, softmax
// cross-entropy (in three steps), and the embedding gather with its
// scatter-add adjoint. They are fused for numerics (max-subtracted
// exponentials) and for speed (one pass over each row).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/op_def.h"
#include "ir/ops/bf16_gemm.h"
#include "tensor/fast_math.h"
#include "tensor/lanes.h"

namespace autoshard {
namespace {

ShapeAndType same_as_first(const Graph& g, const Node& n) {
  AS_CHECK(!n.inputs.empty() && input_dtype(g, n, 0) == DType::F32, op_name(n.op),
           " needs an f32 input");
  AS_CHECK(!input_shape(g, n, 0).empty(), op_name(n.op), " needs at least one axis");
  for (size_t i = 1; i < n.inputs.size(); ++i)
    AS_CHECK(input_shape(g, n, i) == input_shape(g, n, 0), op_name(n.op), ": shapes ",
             shape_str(input_shape(g, n, 0)), " and ", shape_str(input_shape(g, n, i)), " differ");
  return {input_shape(g, n, 0), DType::F32};
}

// ---- softmax over the last axis, optionally causal over the last two ----

void softmax_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const Shape& s = in[0]->shape();
  const int64_t cols = s.back();
  const int64_t rows = in[0]->numel() / std::max<int64_t>(cols, 1);
  const int64_t tq = s.size() >= 2 ? s[s.size() - 2] : 1;
  const bool causal = n.attr<SoftmaxAttrs>().causal;
  const float* x = in[0]->f32();
  float* y = out.f32();
  parallel_for(rows, grain_for(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * cols;
      float* yr = y + r * cols;
      // Query q may see keys up to q + (cols - tq): the usual mask when tq == cols.
      const int64_t visible = causal ? std::min(cols, r % tq + 1 + (cols - tq)) : cols;
      const float mx = lane_max(xr, visible);
      for (int64_t c = 0; c < visible; ++c) yr[c] = fast_exp(xr[c] - mx);
      const float inv = 1.0f / lane_sum<float>(visible, [&](int64_t c) { return yr[c]; });
      for (int64_t c = 0; c < visible; ++c) yr[c] *= inv;
      for (int64_t c = visible; c < cols; ++c) yr[c] = 0.0f;
    }
  });
}

std::vector<Value> softmax_vjp(Graph& g, int id, Value dy) {
  return {g.add(Op::SoftmaxGrad, {g.value(id), dy})};
}

void softmax_grad_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                         const KernelContext&) {
  const int64_t cols = in[0]->shape().back();
  const int64_t rows = in[0]->numel() / std::max<int64_t>(cols, 1);
  const float* y = in[0]->f32();
  const float* dy = in[1]->f32();
  float* dx = out.f32();
  parallel_for(rows, grain_for(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* yr = y + r * cols;
      const float* dyr = dy + r * cols;
      const float dot = lane_sum<float>(cols, [&](int64_t c) { return yr[c] * dyr[c]; });
      for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = yr[c] * (dyr[c] - dot);
    }
  });
}

// ---- normalize: (x - mean) / sqrt(var + eps) over the last axis, or RMS ----

struct RowStats {
  float mean, rstd;  // mean 0 for RMS normalisation
};

RowStats row_stats(const float* x, int64_t n, const EpsilonAttrs& a) {
  const double mean = a.center ? lane_sum<double>(n, [&](int64_t i) { return x[i]; }) / n : 0.0;
  const float fmean = static_cast<float>(mean);
  const double var = lane_sum<double>(n,
                                      [&](int64_t i) {
                                        const float d = x[i] - fmean;
                                        return d * d;
                                      }) /
                     n;
  return {fmean, static_cast<float>(1.0 / std::sqrt(var + a.epsilon))};
}

void normalize_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  const int64_t cols = in[0]->shape().back();
  const int64_t rows = in[0]->numel() / std::max<int64_t>(cols, 1);
  const EpsilonAttrs& a = n.attr<EpsilonAttrs>();
  parallel_for(rows, grain_for(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = in[0]->f32() + r * cols;
      float* y = out.f32() + r * cols;
      const RowStats st = row_stats(x, cols, a);
      for (int64_t c = 0; c < cols; ++c) y[c] = (x[c] - st.mean) * st.rstd;
    }
  });
}

std::vector<Value> normalize_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {g.add(Op::NormalizeGrad, {g.value(n.inputs[0]), dy}, n.attrs)};
}

// dx = rstd (dy - mean(dy) - xhat mean(dy xhat)); without centering the
// mean(dy) term is absent (the mean was never subtracted).
void normalize_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                           const KernelContext&) {
  const int64_t cols = in[0]->shape().back();
  const int64_t rows = in[0]->numel() / std::max<int64_t>(cols, 1);
  const EpsilonAttrs& a = n.attr<EpsilonAttrs>();
  parallel_for(rows, grain_for(cols), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* x = in[0]->f32() + r * cols;
      const float* dy = in[1]->f32() + r * cols;
      float* dx = out.f32() + r * cols;
      const RowStats st = row_stats(x, cols, a);
      const double sum_dy = a.center ? lane_sum<double>(cols, [&](int64_t c) { return dy[c]; }) : 0;
      const double sum_dy_xhat =
          lane_sum<double>(cols, [&](int64_t c) { return dy[c] * (x[c] - st.mean) * st.rstd; });
      const float mean_dy = static_cast<float>(sum_dy / cols);
      const float mean_dy_xhat = static_cast<float>(sum_dy_xhat / cols);
      for (int64_t c = 0; c < cols; ++c) {
        const float xhat = (x[c] - st.mean) * st.rstd;
        dx[c] = st.rstd * (dy[c] - mean_dy - xhat * mean_dy_xhat);
      }
    }
  });
}

// ---- softmax cross-entropy per row, in three steps ----
//
// loss = log(sum_c exp(x_c - m)) + m - x_t for any shift m; m is the row
// maximum, for numerics. Each step sees only its own block of classes when
// the class axis is split: RowMax's maxima and the statistics' sums combine
// over the devices (collectives the partitioner inserts), and no device ever
// holds a whole row of logits.

ShapeAndType row_max_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 1);
  const Shape& x = input_shape(g, n, 0);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && !x.empty(), "row_max needs f32 with an axis");
  return {Shape(x.begin(), x.end() - 1), DType::F32};
}

void row_max_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const int64_t v = in[0]->shape().back(), rows = out.numel();
  const float* x = in[0]->f32();
  float* m = out.f32();
  parallel_for(rows, grain_for(v), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) m[r] = lane_max(x + r * v, v);
  });
}

// (logits [..., V], targets [...], max [...]) -> [..., 2].
ShapeAndType stats_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 3);
  const Shape& logits = input_shape(g, n, 0);
  const Shape& targets = input_shape(g, n, 1);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && input_dtype(g, n, 1) == DType::I32,
           "cross_entropy needs f32 logits and i32 targets");
  AS_CHECK(!logits.empty() && Shape(logits.begin(), logits.end() - 1) == targets,
           "cross_entropy: logits ", shape_str(logits), " do not match targets ",
           shape_str(targets));
  AS_CHECK(input_shape(g, n, 2) == targets, "cross_entropy: row maxima of the wrong shape");
  Shape out = targets;
  out.push_back(2);
  return {out, DType::F32};
}

// The classes this device holds: [offset, offset + local) of `total`.
struct ClassRange {
  int64_t offset = 0, total = 0;
};
ClassRange class_range(const Node& n, int64_t local) {
  const ShardOrigin& o = n.attr<ClassShardAttrs>().logits;
  if (o.whole()) return {0, local};
  return {o.offsets.back(), o.global_shape.back()};
}

int32_t checked_class(int32_t t, int64_t classes) {
  AS_CHECK(t >= 0 && t < classes, "target id ", t, " is out of range for ", classes, " classes");
  return t;
}

void stats_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const int64_t v = in[0]->shape().back(), rows = in[1]->numel();
  const ClassRange cr = class_range(n, v);
  const float* x = in[0]->f32();
  const int32_t* t = in[1]->i32();
  const float* m = in[2]->f32();
  float* st = out.f32();
  for (int64_t r = 0; r < rows; ++r) checked_class(t[r], cr.total);  // before any thread runs
  parallel_for(rows, grain_for(v), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * v;
      const float mr = m[r];
      const double sum = lane_sum<double>(v, [&](int64_t c) { return fast_exp(xr[c] - mr); });
      const int64_t local = t[r] - cr.offset;
      st[2 * r] = static_cast<float>(sum);
      st[2 * r + 1] = local >= 0 && local < v ? xr[local] : 0.0f;
    }
  });
}

ShapeAndType finish_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& st = input_shape(g, n, 0);
  AS_CHECK(!st.empty() && st.back() == 2 && Shape(st.begin(), st.end() - 1) == input_shape(g, n, 1),
           "cross_entropy_finish: statistics and maxima do not match");
  return {input_shape(g, n, 1), DType::F32};
}

void finish_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const float* st = in[0]->f32();
  const float* m = in[1]->f32();
  for (int64_t r = 0; r < out.numel(); ++r)
    out.f32()[r] = std::log(st[2 * r]) + m[r] - st[2 * r + 1];
}

// d loss / d stats = (g / s, -g); the shift m takes no gradient: its
// contributions through the sum and through the loss cancel exactly.
std::vector<Value> finish_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  return {g.add(Op::CrossEntropyFinishGrad, {g.value(n.inputs[0]), dy}), Value{}};
}

ShapeAndType finish_grad_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  return {input_shape(g, n, 0), DType::F32};
}

void finish_grad_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext&) {
  const float* st = in[0]->f32();
  const float* dy = in[1]->f32();
  for (int64_t r = 0; r < in[1]->numel(); ++r) {
    out.f32()[2 * r] = dy[r] / st[2 * r];
    out.f32()[2 * r + 1] = -dy[r];
  }
}

std::vector<Value> stats_vjp(Graph& g, int id, Value dst) {
  const Node& n = g.node(id);
  return {g.add(Op::CrossEntropyStatsGrad,
                {g.value(n.inputs[0]), g.value(n.inputs[1]), g.value(n.inputs[2]), dst}, n.attrs),
          Value{}, Value{}};
}

// dlogits_c = exp(x_c - m) * dstats_0 + [c == t] * dstats_1.
ShapeAndType stats_grad_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 4);
  return {input_shape(g, n, 0), DType::F32};
}

void stats_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                       const KernelContext&) {
  const int64_t v = in[0]->shape().back(), rows = in[1]->numel();
  const ClassRange cr = class_range(n, v);
  const float* x = in[0]->f32();
  const int32_t* t = in[1]->i32();
  const float* m = in[2]->f32();
  const float* dst = in[3]->f32();
  float* dx = out.f32();
  for (int64_t r = 0; r < rows; ++r) checked_class(t[r], cr.total);  // before any thread runs
  parallel_for(rows, grain_for(v), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * v;
      float* dr = dx + r * v;
      const float ds = dst[2 * r], mr = m[r];
      for (int64_t c = 0; c < v; ++c) dr[c] = fast_exp(xr[c] - mr) * ds;
      const int64_t local = t[r] - cr.offset;
      if (local >= 0 && local < v) dr[local] += dst[2 * r + 1];
    }
  });
}

// ---- embedding gather and its adjoint ----

ShapeAndType gather_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& table = input_shape(g, n, 0);
  AS_CHECK(!table.empty(), "gather: the table needs at least one axis");
  AS_CHECK(input_dtype(g, n, 1) == DType::I32, "gather: ids must be i32");
  Shape out = input_shape(g, n, 1);
  out.insert(out.end(), table.begin() + 1, table.end());
  // A table held in bf16 (a frozen embedding) gives its rows widened.
  const DType dtype = input_dtype(g, n, 0);
  return {out, dtype == DType::BF16 ? DType::F32 : dtype};
}

// The table's rows may be a shard [offset, offset + rows) of a global table
// (vocabulary-parallel embedding): ids outside it give zero rows, and the
// partitioner sums the devices' outputs.
struct RowShard {
  int64_t offset = 0, total = 0;
};
RowShard row_shard(const ShardOrigin& table, int64_t local_rows) {
  if (table.whole()) return {0, local_rows};
  return {table.offsets[0], table.global_shape[0]};
}

void gather_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const Tensor& table = *in[0];
  const int64_t rows = table.shape()[0];
  const int64_t width = rows ? table.numel() / rows : 0;
  const GatherAttrs& a = n.attr<GatherAttrs>();
  const RowShard rs = row_shard(a.table, rows);
  const int32_t* ids = in[1]->i32();
  for (int64_t i = 0; i < in[1]->numel(); ++i) {
    const int64_t id = ids[i] + a.id_offset;
    AS_CHECK(id >= 0 && id < rs.total, "token id ", id, " is out of range for a table of ",
             rs.total, " rows");
    const int64_t row = id - rs.offset;
    if (row >= 0 && row < rows && table.dtype() == DType::BF16)
      widen_block(table.data<uint16_t>(), width, row, row + 1, 0, width, out.f32() + i * width);
    else if (row >= 0 && row < rows)
      std::memcpy(out.f32() + i * width, table.f32() + row * width, width * sizeof(float));
    else
      std::fill_n(out.f32() + i * width, width, 0.0f);
  }
}

std::vector<Value> gather_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  if (input_dtype(g, n, 0) == DType::BF16) return {Value{}, Value{}};  // a frozen table
  return {g.add(Op::ScatterAdd, {g.value(n.inputs[1]), dy},
                ScatterAddAttrs{input_shape(g, n, 0), {}, n.attr<GatherAttrs>().id_offset}),
          Value{}};
}

// Each row of dy went to its id's row of the table, so its gradient is that
// row of the table's gradient (keras.ops.scatter's gradient in its values).
std::vector<Value> scatter_add_vjp(Graph& g, int id, Value d) {
  const Node& n = g.node(id);
  return {Value{}, g.add(Op::Gather, {d, g.value(n.inputs[0])},
                         GatherAttrs{{}, n.attr<ScatterAddAttrs>().id_offset})};
}

ShapeAndType scatter_add_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  AS_CHECK(input_dtype(g, n, 0) == DType::I32, "scatter_add: ids must be i32");
  const Shape& table = n.attr<ScatterAddAttrs>().table_shape;
  AS_CHECK(!table.empty(), "scatter_add: the table needs at least one axis");
  Shape rows = input_shape(g, n, 0);
  rows.insert(rows.end(), table.begin() + 1, table.end());
  AS_CHECK(input_shape(g, n, 1) == rows, "scatter_add: values of shape ",
           shape_str(input_shape(g, n, 1)), " must be the ids' shape and a table row's, ",
           shape_str(rows));
  return {table, DType::F32};
}

void scatter_add_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext& ctx) {
  // The table's gradient is the size of the table (GPT-2's: 154 MB), so
  // zeroing it is split over the cores; the scattered rows are few.
  float* table = out.f32();
  if (!ctx.accumulate)
    parallel_for(out.numel(), grain_for(1),
                 [table](int64_t b, int64_t e) { std::fill(table + b, table + e, 0.0f); });
  const int64_t rows = out.shape()[0];
  const int64_t width = rows ? out.numel() / rows : 0;
  const ScatterAddAttrs& a = n.attr<ScatterAddAttrs>();
  const RowShard rs = row_shard(a.table, rows);
  const int32_t* ids = in[0]->i32();
  const float* dy = in[1]->f32();
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    const int64_t id = ids[i] + a.id_offset;
    AS_CHECK(id >= 0 && id < rs.total, "token id ", id, " is out of range for a table of ",
             rs.total, " rows");
    const int64_t r = id - rs.offset;
    if (r < 0 || r >= rows) continue;
    float* row = out.f32() + r * width;
    for (int64_t c = 0; c < width; ++c) row[c] += dy[i * width + c];
  }
}

// ---- sharding ----

ShardDecision softmax_rule(const ShardQuery& q) {
  return row_rule(q, q.node.attr<SoftmaxAttrs>().causal ? 2 : 1);
}
ShardDecision last_axis_rule(const ShardQuery& q) {
  return row_rule(q, 1);
}

bool axis_free(const std::vector<int>& dims, int axis) {
  return axis >= 0 && !overlaps_any(dims, axis);
}

// The split of each row dimension of a loss step: from the first input that
// splits it (inputs may have a trailing non-row axis, `trailing` lists which).
std::vector<int> row_dims(const ShardQuery& q, int rows, const std::vector<int>& trailing) {
  std::vector<int> dims;
  for (int d = 0; d < rows; ++d) {
    int a = -1;
    for (size_t k = 0; k < q.inputs.size() && a < 0; ++k)
      if (q.inputs[k].rank() == rows + trailing[k]) a = q.inputs[k].dims[d];
    dims.push_back(axis_free(dims, a) ? a : -1);
  }
  return dims;
}
Sharding with_last(std::vector<int> dims, int last) {
  dims.push_back(last);
  return {dims, {}};
}

// RowMax: a split class axis leaves partial maxima.
ShardDecision row_max_rule(const ShardQuery& q) {
  const int rows = static_cast<int>(q.node.shape.size());
  std::vector<int> r = row_dims(q, rows, {1});
  const int c = axis_free(r, q.inputs[0].dims.back()) ? q.inputs[0].dims.back() : -1;
  Sharding out{r, {}};
  if (c >= 0) out.partial = axis_members(c), out.partial_op = ReduceOp::Max;
  return {{with_last(r, c)}, out};
}

// CrossEntropyStats: a split class axis leaves partial sums (of the
// exponentials, and of the target logit that one device holds).
ShardDecision stats_rule(const ShardQuery& q) {
  const int rows = q.inputs[1].rank();
  std::vector<int> r = row_dims(q, rows, {1, 0, 0});
  const int c = axis_free(r, q.inputs[0].dims.back()) ? q.inputs[0].dims.back() : -1;
  Sharding out = with_last(r, -1);
  if (c >= 0) out.partial = axis_members(c);
  return {{with_last(r, c), Sharding{r, {}}, Sharding{r, {}}}, out};
}

// CrossEntropyStatsGrad: rows and classes as the logits, statistics whole.
ShardDecision stats_grad_rule(const ShardQuery& q) {
  const int rows = q.inputs[1].rank();
  std::vector<int> r = row_dims(q, rows, {1, 0, 0, 1});
  const int c = axis_free(r, q.inputs[0].dims.back()) ? q.inputs[0].dims.back() : -1;
  const Sharding logits = with_last(r, c);
  return {{logits, Sharding{r, {}}, Sharding{r, {}}, with_last(r, -1)}, logits};
}

// CrossEntropyFinish(stats, max) and its gradient (stats, dloss): per row.
ShardDecision finish_rule(const ShardQuery& q) {
  const int rows = q.inputs[1].rank();
  std::vector<int> r = row_dims(q, rows, {1, 0});
  const Sharding out = q.node.op == Op::CrossEntropyFinish ? Sharding{r, {}} : with_last(r, -1);
  return {{with_last(r, -1), Sharding{r, {}}}, out};
}

void class_shard_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<ClassShardAttrs>(a).logits = info.input_origin(0);
}

// Loops of the loss steps: one per row dimension, then the class axis.
LoopNest row_loops(const Shape& rows, LoopNest& nest) {
  std::vector<int> r;
  for (int64_t d : rows) r.push_back(nest.add({d}));
  nest.output = r;
  return nest;
}
std::vector<int> plus(std::vector<int> dims, int last) {
  dims.push_back(last);
  return dims;
}
LoopNest row_max_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  row_loops(n.shape, nest);
  const int c = nest.add({input_shape(g, n, 0).back(), Loop::Kind::Reduction, ReduceOp::Max});
  nest.inputs = {plus(nest.output, c)};
  return nest;
}
LoopNest stats_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  row_loops(input_shape(g, n, 1), nest);
  const std::vector<int> r = nest.output;
  const int c = nest.add({input_shape(g, n, 0).back(), Loop::Kind::Reduction});
  const int two = nest.add({2, Loop::Kind::Whole});
  nest.inputs = {plus(r, c), r, r};
  nest.output = plus(r, two);
  return nest;
}
LoopNest stats_grad_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  row_loops(input_shape(g, n, 1), nest);
  const std::vector<int> r = nest.output;
  const int c = nest.add({input_shape(g, n, 0).back()});
  const int two = nest.add({2, Loop::Kind::Whole});
  nest.inputs = {plus(r, c), r, r, plus(r, two)};
  nest.output = plus(r, c);
  return nest;
}
LoopNest finish_loops(const Graph& g, const Node& n) {
  LoopNest nest;
  row_loops(input_shape(g, n, 0), nest);
  nest.loops.back().kind = Loop::Kind::Whole;  // the statistics' pair
  std::vector<int> r = nest.output;
  r.pop_back();
  nest.inputs = {nest.output, r};
  if (n.op == Op::CrossEntropyFinish) nest.output = r;
  return nest;
}

// Softmax and layer norm: rows parallel, the reduced axes whole.
LoopNest last_axes_loops(const Graph& g, const Node& n, int whole) {
  LoopNest nest = broadcast_loops(g, n);
  for (int i = 0; i < whole && i < static_cast<int>(nest.loops.size()); ++i)
    nest.loops[nest.loops.size() - 1 - i].kind = Loop::Kind::Whole;
  return nest;
}
LoopNest softmax_loops(const Graph& g, const Node& n) {
  return last_axes_loops(g, n, n.attr<SoftmaxAttrs>().causal ? 2 : 1);
}
LoopNest last_axis_loops(const Graph& g, const Node& n) {
  return last_axes_loops(g, n, 1);
}

// ids keep their split; the table's row split (vocabulary-parallel
// embedding) makes each device's output a partial sum.
ShardDecision gather_rule(const ShardQuery& q) {
  const Sharding& table = q.inputs[0];
  Sharding ids = without_partial(q.inputs[1]);
  Sharding req_table = Sharding::replicated(table.rank());
  std::vector<int> out = ids.dims;
  for (int d = 1; d < table.rank(); ++d) {
    int a = axis_free(out, table.dims[d]) ? table.dims[d] : -1;
    req_table.dims[d] = a;
    out.push_back(a);
  }
  Sharding result{out, {}};
  if (axis_free(out, table.dims[0])) {
    req_table.dims[0] = table.dims[0];
    result.partial = axis_members(table.dims[0]);
  }
  return {{req_table, ids}, result};
}

void gather_localize(OpAttrs& a, const LocalizeInfo& info) {
  std::get<GatherAttrs>(a).table = info.input_origin(0);
}

// Gather: the table's rows are a sum-reduction (a row split leaves partial
// sums: zero rows for ids held elsewhere); ids dims and the table's other
// dims are parallel.
LoopNest gather_loops(const Graph& g, const Node& n) {
  const Shape& table = input_shape(g, n, 0);
  const Shape& ids = input_shape(g, n, 1);
  LoopNest nest;
  std::vector<int> id_dims, table_dims{nest.add({table[0], Loop::Kind::Reduction})};
  for (int64_t d : ids) id_dims.push_back(nest.add({d}));
  nest.output = id_dims;
  for (size_t d = 1; d < table.size(); ++d) {
    table_dims.push_back(nest.add({table[d]}));
    nest.output.push_back(table_dims.back());
  }
  nest.inputs = {table_dims, id_dims};
  return nest;
}

// The adjoint of gather: rows are split as the consumers (the optimizer)
// want them, each device adding only the ids of its rows; split ids leave
// partial sums.
ShardDecision scatter_add_rule(const ShardQuery& q) {
  const Sharding dy = partial_sum(q.inputs[1]) ? q.inputs[1] : without_partial(q.inputs[1]);
  const int lead = q.inputs[0].rank();
  Sharding ids = Sharding::replicated(lead), req_dy = dy;
  Sharding out{{-1}, dy.partial};
  std::vector<int> used = dy.partial;  // axes already taken
  for (int d = lead; d < dy.rank(); ++d) {
    out.dims.push_back(dy.dims[d]);
    if (dy.dims[d] >= 0) used.push_back(dy.dims[d]);
  }
  for (int d = 0; d < lead; ++d) {
    int a = dy.dims[d] >= 0 ? dy.dims[d] : q.inputs[0].dims[d];
    if (!axis_free(used, a)) a = -1;
    ids.dims[d] = req_dy.dims[d] = a;
    if (a >= 0) used.push_back(a), add_partial(out.partial, a);
  }
  const int row = q.hint && !q.hint->dims.empty() ? q.hint->dims[0] : -1;
  if (axis_free(used, row)) out.dims[0] = row;
  std::sort(out.partial.begin(), out.partial.end());
  return {{ids, req_dy}, out};
}

void scatter_add_localize(OpAttrs& a, const LocalizeInfo& info) {
  auto& s = std::get<ScatterAddAttrs>(a);
  s.table_shape = info.local_output_shape();
  s.table = info.output_origin();
}

// ScatterAdd(ids, dy) -> table: ids dims are sum-reductions (split: partial
// sums); the table's rows a parallel loop no input has (each device adds the
// ids of its own rows); the other table dims come from dy.
LoopNest scatter_add_loops(const Graph& g, const Node& n) {
  const Shape& ids = input_shape(g, n, 0);
  const Shape& dy = input_shape(g, n, 1);
  LoopNest nest;
  std::vector<int> id_dims;
  for (int64_t d : ids) id_dims.push_back(nest.add({d, Loop::Kind::Reduction}));
  std::vector<int> dy_dims = id_dims;
  nest.output = {nest.add({n.shape[0]})};
  for (size_t d = ids.size(); d < dy.size(); ++d) {
    dy_dims.push_back(nest.add({dy[d]}));
    nest.output.push_back(dy_dims.back());
  }
  nest.inputs = {id_dims, dy_dims};
  return nest;
}

// The row maxima only shift the loss; they take no gradient.
std::vector<Value> no_gradient(Graph&, int, Value) {
  return {Value{}};
}

// Operations per element of the row-wise kernels (exp counted as ~12).
OpCost softmax_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 16);
}
OpCost four_flops(const Node&, const CostShapes& s) {
  return streaming_cost(s, 4);
}
OpCost normalize_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 8);
}
OpCost normalize_grad_cost(const Node&, const CostShapes& s) {
  return streaming_cost(s, 14);
}
OpCost row_cost(const Node&, const CostShapes& s) {
  double in = 0;
  for (const Shape& x : s.inputs) in += elements(x);
  return {in, 4 * (in + elements(s.output)), false};
}
OpCost stats_cost(const Node&, const CostShapes& s) {
  const double logits = elements(s.inputs[0]);
  return {14 * logits, 4 * (logits + elements(s.output)), false};
}
// Gather copies the looked-up rows; scatter-add adds every row of dy in.
OpCost gather_cost(const Node&, const CostShapes& s) {
  return {0, 4 * (2 * elements(s.output) + elements(s.inputs[1])), false};
}
OpCost scatter_cost(const Node&, const CostShapes& s) {
  const double dy = elements(s.inputs[1]);
  return {dy, 4 * (2 * dy + elements(s.output) + elements(s.inputs[0])), false};
}

}  // namespace

void register_nn_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Softmax)] = {.name = "softmax",
                            .infer = same_as_first,
                            .kernel = softmax_kernel,
                            .vjp = softmax_vjp,
                            .shard = softmax_rule,
                            .loops = softmax_loops,
                            .cost = softmax_cost};
  t[size_t(Op::SoftmaxGrad)] = {.name = "softmax_grad",
                                .infer = same_as_first,
                                .kernel = softmax_grad_kernel,
                                .shard = last_axis_rule,
                                .loops = last_axis_loops,
                                .cost = four_flops};
  t[size_t(Op::Normalize)] = {.name = "normalize",
                              .infer = same_as_first,
                              .kernel = normalize_kernel,
                              .vjp = normalize_vjp,
                              .shard = last_axis_rule,
                              .loops = last_axis_loops,
                              .cost = normalize_cost};
  t[size_t(Op::NormalizeGrad)] = {.name = "normalize_grad",
                                  .infer = same_as_first,
                                  .kernel = normalize_grad_kernel,
                                  .shard = last_axis_rule,
                                  .loops = last_axis_loops,
                                  .cost = normalize_grad_cost};
  t[size_t(Op::RowMax)] = {.name = "row_max",
                           .infer = row_max_infer,
                           .kernel = row_max_kernel,
                           .vjp = no_gradient,
                           .shard = row_max_rule,
                           .loops = row_max_loops,
                           .cost = row_cost};
  t[size_t(Op::CrossEntropyStats)] = {.name = "cross_entropy_stats",
                                      .infer = stats_infer,
                                      .kernel = stats_kernel,
                                      .vjp = stats_vjp,
                                      .shard = stats_rule,
                                      .localize = class_shard_localize,
                                      .loops = stats_loops,
                                      .cost = stats_cost};
  t[size_t(Op::CrossEntropyFinish)] = {.name = "cross_entropy_finish",
                                       .infer = finish_infer,
                                       .kernel = finish_kernel,
                                       .vjp = finish_vjp,
                                       .shard = finish_rule,
                                       .loops = finish_loops,
                                       .cost = row_cost};
  t[size_t(Op::CrossEntropyFinishGrad)] = {.name = "cross_entropy_finish_grad",
                                           .infer = finish_grad_infer,
                                           .kernel = finish_grad_kernel,
                                           .shard = finish_rule,
                                           .loops = finish_loops,
                                           .cost = row_cost};
  t[size_t(Op::CrossEntropyStatsGrad)] = {.name = "cross_entropy_stats_grad",
                                          .infer = stats_grad_infer,
                                          .kernel = stats_grad_kernel,
                                          .shard = stats_grad_rule,
                                          .localize = class_shard_localize,
                                          .loops = stats_grad_loops,
                                          .cost = stats_cost};
  t[size_t(Op::Gather)] = {.name = "gather",
                           .infer = gather_infer,
                           .kernel = gather_kernel,
                           .vjp = gather_vjp,
                           .shard = gather_rule,
                           .localize = gather_localize,
                           .loops = gather_loops,
                           .cost = gather_cost,
                           .reads_bf16 = 0b01};
  t[size_t(Op::ScatterAdd)] = {.name = "scatter_add",
                               .infer = scatter_add_infer,
                               .kernel = scatter_add_kernel,
                               .vjp = scatter_add_vjp,
                               .shard = scatter_add_rule,
                               .localize = scatter_add_localize,
                               .loops = scatter_add_loops,
                               .linearity = Linearity::Second,
                               .cost = scatter_cost,
                               .accumulates = true,
                               .makes_weight_gradient = true};
}

}  // namespace autoshard
