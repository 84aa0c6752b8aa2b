// Fused neural-network primitives: softmax, normalisation, softmax
// cross-entropy, and the embedding gather with its scatter-add adjoint. They
// are fused for numerics (max-subtracted exponentials) and for speed (one pass
// over each row).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "autoshard/error.h"
#include "autoshard/ops.h"
#include "ir/op_def.h"
#include "tensor/fast_math.h"

namespace autoshard {
namespace {

ShapeAndType same_as_first(const Graph& g, const Node& n) {
  check(!n.inputs.empty() && input_dtype(g, n, 0) == DType::F32, op_name(n.op),
        " needs an f32 input");
  check(!input_shape(g, n, 0).empty(), op_name(n.op), " needs at least one axis");
  for (size_t i = 1; i < n.inputs.size(); ++i)
    if (input_dtype(g, n, i) == DType::F32 && n.op != Op::CrossEntropyGrad)
      check(input_shape(g, n, i) == input_shape(g, n, 0), op_name(n.op), ": shapes ",
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
  check(input_dtype(g, n, 0) == DType::F32 && input_dtype(g, n, 1) == DType::I32,
        "cross_entropy needs f32 logits and i32 targets");
  check(!logits.empty() && Shape(logits.begin(), logits.end() - 1) == targets,
        "cross_entropy: logits ", shape_str(logits), " do not match targets ", shape_str(targets));
  return {targets, DType::F32};
}

int32_t checked_class(int32_t t, int64_t classes) {
  check(t >= 0 && t < classes, "target id ", t, " is out of range for ", classes, " classes");
  return t;
}

void cross_entropy_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                          const KernelContext&) {
  const int64_t v = in[0]->shape().back();
  for (int64_t r = 0; r < out.numel(); ++r) {
    const float* x = in[0]->f32() + r * v;
    const int32_t t = checked_class(in[1]->i32()[r], v);
    float mx = -INFINITY;
    for (int64_t c = 0; c < v; ++c) mx = std::max(mx, x[c]);
    double sum = 0;
    for (int64_t c = 0; c < v; ++c) sum += fast_exp(x[c] - mx);
    out.f32()[r] = static_cast<float>(std::log(sum) + mx - x[t]);
  }
}

std::vector<Value> cross_entropy_vjp(Graph& g, int id, Value dy) {
  const Node n = g.node(id);
  return {g.add(Op::CrossEntropyGrad, {g.value(n.inputs[0]), g.value(n.inputs[1]), dy}), Value{}};
}

void cross_entropy_grad_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                               const KernelContext&) {
  const int64_t v = in[0]->shape().back();
  const int64_t rows = in[1]->numel();
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = in[0]->f32() + r * v;
    float* dx = out.f32() + r * v;
    const int32_t t = checked_class(in[1]->i32()[r], v);
    const float g = in[2]->f32()[r];
    float mx = -INFINITY;
    for (int64_t c = 0; c < v; ++c) mx = std::max(mx, x[c]);
    double sum = 0;
    for (int64_t c = 0; c < v; ++c) sum += (dx[c] = fast_exp(x[c] - mx));
    const float scale = static_cast<float>(g / sum);
    for (int64_t c = 0; c < v; ++c) dx[c] *= scale;
    dx[t] -= g;
  }
}

// ---- embedding gather and its adjoint ----

ShapeAndType gather_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const Shape& table = input_shape(g, n, 0);
  check(!table.empty(), "gather: the table needs at least one axis");
  check(input_dtype(g, n, 1) == DType::I32, "gather: ids must be i32");
  Shape out = input_shape(g, n, 1);
  out.insert(out.end(), table.begin() + 1, table.end());
  return {out, input_dtype(g, n, 0)};
}

void gather_kernel(const Node&, std::span<Tensor* const> in, Tensor& out, const KernelContext&) {
  const Tensor& table = *in[0];
  const int64_t rows = table.shape()[0];
  const int64_t width = rows ? table.numel() / rows : 0;
  const int32_t* ids = in[1]->i32();
  for (int64_t i = 0; i < in[1]->numel(); ++i) {
    check(ids[i] >= 0 && ids[i] < rows, "token id ", ids[i], " is out of range for a table of ",
          rows, " rows");
    std::memcpy(out.f32() + i * width, table.f32() + ids[i] * width, width * sizeof(float));
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
  check(input_dtype(g, n, 0) == DType::I32, "scatter_add: ids must be i32");
  return {n.attrs.ints, DType::F32};
}

void scatter_add_kernel(const Node&, std::span<Tensor* const> in, Tensor& out,
                        const KernelContext&) {
  std::fill_n(out.f32(), out.numel(), 0.0f);
  const int64_t rows = out.shape()[0];
  const int64_t width = rows ? out.numel() / rows : 0;
  const int32_t* ids = in[0]->i32();
  const float* dy = in[1]->f32();
  for (int64_t i = 0; i < in[0]->numel(); ++i) {
    check(ids[i] >= 0 && ids[i] < rows, "token id ", ids[i], " is out of range for a table of ",
          rows, " rows");
    float* row = out.f32() + ids[i] * width;
    for (int64_t c = 0; c < width; ++c) row[c] += dy[i * width + c];
  }
}

}  // namespace

void register_nn_ops(std::vector<OpDef>& t) {
  t[size_t(Op::Softmax)] = {"softmax", same_as_first, softmax_kernel, softmax_vjp};
  t[size_t(Op::SoftmaxGrad)] = {"softmax_grad", same_as_first, softmax_grad_kernel};
  t[size_t(Op::Normalize)] = {"normalize", same_as_first, normalize_kernel, normalize_vjp};
  t[size_t(Op::NormalizeGrad)] = {"normalize_grad", same_as_first, normalize_grad_kernel};
  t[size_t(Op::CrossEntropy)] = {"cross_entropy", cross_entropy_infer, cross_entropy_kernel,
                                 cross_entropy_vjp};
  t[size_t(Op::CrossEntropyGrad)] = {"cross_entropy_grad", same_as_first,
                                     cross_entropy_grad_kernel};
  t[size_t(Op::Gather)] = {"gather", gather_infer, gather_kernel, gather_vjp};
  t[size_t(Op::ScatterAdd)] = {"scatter_add", scatter_add_infer, scatter_add_kernel};
}

}  // namespace autoshard
