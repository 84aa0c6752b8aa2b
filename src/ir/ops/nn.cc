// Fused neural-network primitives: softmax, normalisation, softmax
// cross-entropy, and the embedding gather with its scatter-add adjoint. They
// are fused for numerics (max-subtracted exponentials) and for speed (one pass
// over each row).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "autoshard/comm/communicator.h"
#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "ir/op_def.h"
#include "tensor/fast_math.h"

namespace autoshard {
namespace {

ShapeAndType same_as_first(const Graph& g, const Node& n) {
  AS_CHECK(!n.inputs.empty() && input_dtype(g, n, 0) == DType::F32, op_name(n.op),
        " needs an f32 input");
  AS_CHECK(!input_shape(g, n, 0).empty(), op_name(n.op), " needs at least one axis");
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (input_dtype(g, n, i) == DType::F32 && n.op != Op::CrossEntropyGrad)
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
  const bool causal = n.attrs.i != 0;
  const float* x = in[0]->f32();
  float* y = out.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    // Query q may see keys up to q + (cols - tq): the usual mask when tq == cols.
    const int64_t visible = causal ? std::min(cols, r % tq + 1 + (cols - tq)) : cols;
    float mx = -INFINITY;
    for (int64_t c = 0; c < visible; ++c) mx = std::max(mx, xr[c]);
    float sum = 0;
    for (int64_t c = 0; c < visible; ++c) sum += (yr[c] = fast_exp(xr[c] - mx));
    const float inv = 1.0f / sum;
    for (int64_t c = 0; c < visible; ++c) yr[c] *= inv;
    for (int64_t c = visible; c < cols; ++c) yr[c] = 0.0f;
  }
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
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float dot = 0;
    for (int64_t c = 0; c < cols; ++c) dot += yr[c] * dyr[c];
    for (int64_t c = 0; c < cols; ++c) dx[r * cols + c] = yr[c] * (dyr[c] - dot);
  }
}

// ---- normalize: (x - mean) / sqrt(var + eps) over the last axis ----

struct RowStats {
  float mean, rstd;
};

RowStats row_stats(const float* x, int64_t n, double eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const double mean = sum / n;
  double var = 0;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  return {static_cast<float>(mean), static_cast<float>(1.0 / std::sqrt(var + eps))};
}

void normalize_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                      const KernelContext&) {
  const int64_t cols = in[0]->shape().back();
  const int64_t rows = in[0]->numel() / std::max<int64_t>(cols, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in[0]->f32() + r * cols;
    float* y = out.f32() + r * cols;
    RowStats st = row_stats(x, cols, n.attrs.f);
    for (int64_t c = 0; c < cols; ++c) y[c] = (x[c] - st.mean) * st.rstd;
  }
}

std::vector<Value> normalize_vjp(Graph& g, int id, Value dy) {
  const Node n = g.node(id);
  Attrs a;
  a.f = n.attrs.f;
  return {g.add(Op::NormalizeGrad, {g.value(n.inputs[0]), dy}, a)};
}

void normalize_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                           const KernelContext&) {
  const int64_t cols = in[0]->shape().back();
  const int64_t rows = in[0]->numel() / std::max<int64_t>(cols, 1);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in[0]->f32() + r * cols;
    const float* dy = in[1]->f32() + r * cols;
    float* dx = out.f32() + r * cols;
    RowStats st = row_stats(x, cols, n.attrs.f);
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      sum_dy += dy[c];
      sum_dy_xhat += dy[c] * (x[c] - st.mean) * st.rstd;
    }
    const float mean_dy = static_cast<float>(sum_dy / cols);
    const float mean_dy_xhat = static_cast<float>(sum_dy_xhat / cols);
    for (int64_t c = 0; c < cols; ++c) {
      float xhat = (x[c] - st.mean) * st.rstd;
      dx[c] = st.rstd * (dy[c] - mean_dy - xhat * mean_dy_xhat);
    }
  }
}

// ---- softmax cross-entropy per row ----

ShapeAndType cross_entropy_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& logits = input_shape(g, n, 0);
  const Shape& targets = input_shape(g, n, 1);
  AS_CHECK(input_dtype(g, n, 0) == DType::F32 && input_dtype(g, n, 1) == DType::I32,
        "cross_entropy needs f32 logits and i32 targets");
  AS_CHECK(!logits.empty() && Shape(logits.begin(), logits.end() - 1) == targets,
        "cross_entropy: logits ", shape_str(logits), " do not match targets ", shape_str(targets));
  return {targets, DType::F32};
}

int32_t checked_class(int32_t t, int64_t classes) {
  AS_CHECK(t >= 0 && t < classes, "target id ", t, " is out of range for ", classes, " classes");
  return t;
}

// The class dimension may be split over a mesh axis (vocabulary-parallel
// loss): each device holds classes [offset, offset + v) of every row, and the
// row max, the sum of exponentials and the target's logit are reduced over the
// axis. Full logits are never gathered.
struct ClassShard {
  int64_t offset = 0;
  int axis = -1;
};
ClassShard class_shard(const Node& n) {
  return {n.attrs.shard_offsets.empty() ? 0 : n.attrs.shard_offsets.back(), n.attrs.comm_axis};
}

// Per row: the max over all classes and the sum of exp(x - max).
void row_max_and_sum(const Tensor& logits, int64_t rows, const ClassShard& cs,
                     const KernelContext& ctx, std::vector<float>& mx, std::vector<float>& sum) {
  const int64_t v = logits.shape().back();
  mx.assign(rows, -INFINITY);
  sum.assign(rows, 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < v; ++c) mx[r] = std::max(mx[r], logits.f32()[r * v + c]);
  if (cs.axis >= 0) ctx.comm->all_reduce(mx.data(), rows, ReduceOp::Max, ctx.group(cs.axis));
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = logits.f32() + r * v;
    double s = 0;
    for (int64_t c = 0; c < v; ++c) s += fast_exp(x[c] - mx[r]);
    sum[r] = static_cast<float>(s);
  }
  if (cs.axis >= 0) ctx.comm->all_reduce(sum.data(), rows, ReduceOp::Sum, ctx.group(cs.axis));
}

int64_t total_classes(const Node& n, int64_t local) {
  return n.attrs.global_shape.empty() ? local : n.attrs.global_shape.back();
}

void cross_entropy_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                          const KernelContext& ctx) {
  const int64_t v = in[0]->shape().back(), rows = out.numel();
  const ClassShard cs = class_shard(n);
  const int64_t classes = total_classes(n, v);
  std::vector<float> mx, sum, target(rows, 0.0f);
  row_max_and_sum(*in[0], rows, cs, ctx, mx, sum);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = checked_class(in[1]->i32()[r], classes) - cs.offset;
    if (t >= 0 && t < v) target[r] = in[0]->f32()[r * v + t];
  }
  if (cs.axis >= 0) ctx.comm->all_reduce(target.data(), rows, ReduceOp::Sum, ctx.group(cs.axis));
  for (int64_t r = 0; r < rows; ++r) out.f32()[r] = std::log(sum[r]) + mx[r] - target[r];
}

std::vector<Value> cross_entropy_vjp(Graph& g, int id, Value dy) {
  const Node n = g.node(id);
  return {g.add(Op::CrossEntropyGrad, {g.value(n.inputs[0]), g.value(n.inputs[1]), dy}), Value{}};
}

void cross_entropy_grad_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                               const KernelContext& ctx) {
  const int64_t v = in[0]->shape().back(), rows = in[1]->numel();
  const ClassShard cs = class_shard(n);
  const int64_t classes = total_classes(n, v);
  std::vector<float> mx, sum;
  row_max_and_sum(*in[0], rows, cs, ctx, mx, sum);
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in[0]->f32() + r * v;
    float* dx = out.f32() + r * v;
    const float g = in[2]->f32()[r];
    const float scale = g / sum[r];
    for (int64_t c = 0; c < v; ++c) dx[c] = fast_exp(x[c] - mx[r]) * scale;
    const int64_t t = checked_class(in[1]->i32()[r], classes) - cs.offset;
    if (t >= 0 && t < v) dx[t] -= g;
  }
}

// ---- embedding gather and its adjoint ----

ShapeAndType gather_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& table = input_shape(g, n, 0);
  AS_CHECK(!table.empty(), "gather: the table needs at least one axis");
  AS_CHECK(input_dtype(g, n, 1) == DType::I32, "gather: ids must be i32");
  Shape out = input_shape(g, n, 1);
  out.insert(out.end(), table.begin() + 1, table.end());
  return {out, input_dtype(g, n, 0)};
}

// The table's rows may be a shard [offset, offset + rows) of a global table
// (vocabulary-parallel embedding): ids outside it give zero rows, and the
// partitioner sums the devices' outputs.
struct RowShard {
  int64_t offset = 0, total = 0;
};
RowShard row_shard(const Node& n, int64_t local_rows) {
  if (n.attrs.global_shape.empty()) return {0, local_rows};
  return {n.attrs.shard_offsets[0], n.attrs.global_shape[0]};
}

void gather_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const Tensor& table = *in[0];
  const int64_t rows = table.shape()[0];
  const int64_t width = rows ? table.numel() / rows : 0;
  const RowShard rs = row_shard(n, rows);
  const int32_t* ids = in[1]->i32();
  for (int64_t i = 0; i < in[1]->numel(); ++i) {
    AS_CHECK(ids[i] >= 0 && ids[i] < rs.total, "token id ", ids[i], " is out of range for a table of ",
          rs.total, " rows");
    const int64_t row = ids[i] - rs.offset;
    if (row >= 0 && row < rows)
      std::memcpy(out.f32() + i * width, table.f32() + row * width, width * sizeof(float));
    else
      std::fill_n(out.f32() + i * width, width, 0.0f);
  }
}

std::vector<Value> gather_vjp(Graph& g, int id, Value dy) {
  const Node n = g.node(id);
  Attrs a;
  a.ints = input_shape(g, n, 0);
  return {g.add(Op::ScatterAdd, {g.value(n.inputs[1]), dy}, a), Value{}};
}

ShapeAndType scatter_add_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  AS_CHECK(input_dtype(g, n, 0) == DType::I32, "scatter_add: ids must be i32");
  return {n.attrs.ints, DType::F32};
}

void scatter_add_kernel(const Node& n, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext&) {
  std::fill_n(out.f32(), out.numel(), 0.0f);
  const int64_t rows = out.shape()[0];
  const int64_t width = rows ? out.numel() / rows : 0;
  const RowShard rs = row_shard(n, rows);
  const int32_t* ids = in[0]->i32();
  const float* dy = in[1]->f32();
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    AS_CHECK(ids[i] >= 0 && ids[i] < rs.total, "token id ", ids[i], " is out of range for a table of ",
          rs.total, " rows");
    const int64_t r = ids[i] - rs.offset;
    if (r < 0 || r >= rows) continue;
    float* row = out.f32() + r * width;
    for (int64_t c = 0; c < width; ++c) row[c] += dy[i * width + c];
  }
}

// ---- sharding ----

ShardDecision softmax_rule(const ShardQuery& q) {
  return row_rule(q, q.node.attrs.i ? 2 : 1);
}
ShardDecision last_axis_rule(const ShardQuery& q) {
  return row_rule(q, 1);
}

bool axis_free(const std::vector<int>& dims, int axis) {
  return axis >= 0 && std::find(dims.begin(), dims.end(), axis) == dims.end();
}

// Rows keep their split (from the logits, else the targets); the class axis
// may stay split too, which makes the loss vocabulary-parallel.
std::pair<std::vector<int>, int> loss_layout(const ShardQuery& q) {
  const Sharding& logits = q.inputs[0];
  const Sharding& targets = q.inputs[1];
  std::vector<int> rows;
  for (int d = 0; d + 1 < logits.rank(); ++d) {
    int a = logits.dims[d] >= 0 ? logits.dims[d] : targets.dims[d];
    rows.push_back(axis_free(rows, a) ? a : -1);
  }
  int classes = axis_free(rows, logits.dims.back()) ? logits.dims.back() : -1;
  return {rows, classes};
}

ShardDecision cross_entropy_rule(const ShardQuery& q) {
  auto [rows, classes] = loss_layout(q);
  std::vector<int> with_classes = rows;
  with_classes.push_back(classes);
  Sharding r{rows, {}};
  ShardDecision d{{Sharding{with_classes, {}}, r}, r};
  if (q.node.op == Op::CrossEntropyGrad) {
    d.inputs.push_back(r);  // dloss
    d.output = d.inputs[0];
  }
  return d;
}

void cross_entropy_localize(Attrs& a, const LocalizeInfo& info) {
  a.global_shape = info.input_shapes[0];
  a.shard_offsets = info.input_offsets(0);
  a.comm_axis = info.decision.inputs[0].dims.back();
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
    result.partial = {table.dims[0]};
  }
  return {{req_table, ids}, result};
}

void gather_localize(Attrs& a, const LocalizeInfo& info) {
  a.global_shape = info.input_shapes[0];
  a.shard_offsets = info.input_offsets(0);
}

// The adjoint of gather: rows are split as the consumers (the optimizer)
// want them, each device adding only the ids of its rows; split ids leave
// partial sums.
ShardDecision scatter_add_rule(const ShardQuery& q) {
  const Sharding& dy = q.inputs[1];
  const int lead = q.inputs[0].rank();
  Sharding ids = Sharding::replicated(lead);
  Sharding req_dy = dy;
  Sharding out{{-1}, dy.partial};
  for (int d = 0; d < lead; ++d) {
    int a = dy.dims[d] >= 0 ? dy.dims[d] : q.inputs[0].dims[d];
    if (!axis_free(ids.dims, a) || dy.is_partial(a)) a = -1;
    ids.dims[d] = req_dy.dims[d] = a;
    if (a >= 0) out.partial.push_back(a);
  }
  for (int d = lead; d < dy.rank(); ++d) out.dims.push_back(dy.dims[d]);
  int row = q.hint && !q.hint->dims.empty() ? q.hint->dims[0] : -1;
  if (axis_free(req_dy.dims, row) && !dy.is_partial(row)) out.dims[0] = row;
  std::sort(out.partial.begin(), out.partial.end());
  return {{ids, req_dy}, out};
}

void scatter_add_localize(Attrs& a, const LocalizeInfo& info) {
  a.ints = info.local_output_shape();
  a.global_shape = info.global.shape;
  a.shard_offsets = info.decision.output.offsets(info.global.shape, info.mesh, info.device);
}

}  // namespace

void register_nn_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Softmax)] = {.name = "softmax",
                            .infer = same_as_first,
                            .kernel = softmax_kernel,
                            .vjp = softmax_vjp,
                            .shard = softmax_rule};
  t[size_t(Op::SoftmaxGrad)] = {.name = "softmax_grad",
                                .infer = same_as_first,
                                .kernel = softmax_grad_kernel,
                                .shard = last_axis_rule};
  t[size_t(Op::Normalize)] = {.name = "normalize",
                              .infer = same_as_first,
                              .kernel = normalize_kernel,
                              .vjp = normalize_vjp,
                              .shard = last_axis_rule};
  t[size_t(Op::NormalizeGrad)] = {.name = "normalize_grad",
                                  .infer = same_as_first,
                                  .kernel = normalize_grad_kernel,
                                  .shard = last_axis_rule};
  t[size_t(Op::CrossEntropy)] = {.name = "cross_entropy",
                                 .infer = cross_entropy_infer,
                                 .kernel = cross_entropy_kernel,
                                 .vjp = cross_entropy_vjp,
                                 .shard = cross_entropy_rule,
                                 .localize = cross_entropy_localize};
  t[size_t(Op::CrossEntropyGrad)] = {.name = "cross_entropy_grad",
                                     .infer = same_as_first,
                                     .kernel = cross_entropy_grad_kernel,
                                     .shard = cross_entropy_rule,
                                     .localize = cross_entropy_localize};
  t[size_t(Op::Gather)] = {.name = "gather",
                           .infer = gather_infer,
                           .kernel = gather_kernel,
                           .vjp = gather_vjp,
                           .shard = gather_rule,
                           .localize = gather_localize};
  t[size_t(Op::ScatterAdd)] = {.name = "scatter_add",
                               .infer = scatter_add_infer,
                               .kernel = scatter_add_kernel,
                               .shard = scatter_add_rule,
                               .localize = scatter_add_localize};
}

}  // namespace autoshard
