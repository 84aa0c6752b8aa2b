// Einsum: the universal contraction (Dense, EinsumDense, attention, LM head).
// The kernel maps any two-operand equation onto strided batched GEMM calls
// without copying whenever the operands' letters are laid out as matrices
// (the common case, attention included); otherwise it copies the operand into
// a canonical layout first.
#include <algorithm>
#include <map>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/tensor/parallel.h"
#include "ir/einsum_equation.h"
#include "ir/op_def.h"
#include "ir/ops/bf16_gemm.h"
#include "ir/ops/gemm.h"
#include "tensor/quantize.h"

namespace autoshard {

EinsumAttrs parse_einsum(const std::string& equation) {
  EinsumAttrs e;
  size_t comma = equation.find(',');
  size_t arrow = equation.find("->");
  AS_CHECK(comma != std::string::npos && arrow != std::string::npos && comma < arrow,
           "einsum equation '", equation, "' must look like 'ab,bc->ac'");
  e.a = equation.substr(0, comma);
  e.b = equation.substr(comma + 1, arrow - comma - 1);
  e.out = equation.substr(arrow + 2);
  for (const std::string* s : {&e.a, &e.b, &e.out})
    for (size_t i = 0; i < s->size(); ++i) {
      char c = (*s)[i];
      AS_CHECK(std::isalpha(static_cast<unsigned char>(c)), "einsum equation '", equation,
               "': only letters are allowed in terms");
      AS_CHECK(s->find(c, i + 1) == std::string::npos, "einsum equation '", equation, "': letter '",
               c, "' repeats within one term (diagonals are not supported)");
    }
  return e;
}

namespace {

ShapeAndType einsum_infer(const Graph& g, const Node& n) {
  expect_inputs(n, 2);
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  const Shape& sa = input_shape(g, n, 0);
  const Shape& sb = input_shape(g, n, 1);
  AS_CHECK(sa.size() == e.a.size() && sb.size() == e.b.size(), "einsum '", e.equation(),
           "': operand shapes ", shape_str(sa), " and ", shape_str(sb), " do not match the terms");
  std::map<char, int64_t> size;
  auto note = [&](const std::string& term, const Shape& s) {
    for (size_t i = 0; i < term.size(); ++i) {
      auto [it, fresh] = size.emplace(term[i], s[i]);
      AS_CHECK(fresh || it->second == s[i], "einsum '", e.equation(), "': letter '", term[i],
               "' has sizes ", it->second, " and ", s[i]);
    }
  };
  note(e.a, sa);
  note(e.b, sb);
  Shape out;
  for (char c : e.out) {
    AS_CHECK(size.count(c), "einsum '", e.equation(), "': output letter '", c,
             "' is in no operand");
    out.push_back(size[c]);
  }
  for (const auto& [c, s] : size)
    AS_CHECK(e.out.find(c) != std::string::npos ||
                 (e.a.find(c) != std::string::npos && e.b.find(c) != std::string::npos),
             "internal: einsum letter '", c, "' must be summed before the contraction");
  return {out, DType::F32};
}

// One operand as seen by the GEMM: a base pointer (f32, or bf16 for a
// weight held so) and a stride per letter.
struct Operand {
  const float* data = nullptr;
  const uint16_t* half = nullptr;
  std::map<char, int64_t> stride;
};

std::map<char, int64_t> letter_strides(const std::string& term, const Shape& shape) {
  std::vector<int64_t> st = strides_of(shape);
  std::map<char, int64_t> m;
  for (size_t i = 0; i < term.size(); ++i) m[term[i]] = st[i];
  return m;
}

// A group of letters walked as one matrix dimension: its size, and its stride
// if the letters are laid out contiguously one inside the next.
struct Group {
  int64_t size = 1;
  int64_t stride = 0;
  bool free = true;  // size <= 1: any stride works
  bool ok = true;
};

Group group_of(const std::string& letters, const std::map<char, int64_t>& size,
               const std::map<char, int64_t>& stride) {
  Group g;
  for (char c : letters) {
    int64_t n = size.at(c);
    g.size *= n;
    if (n == 1) continue;
    int64_t s = stride.at(c);
    if (!g.free && g.stride != s * n) g.ok = false;
    g.stride = s;
    g.free = false;
  }
  return g;
}

// How a (rows x cols) matrix is passed to BLAS in row-major order.
struct MatrixArg {
  bool ok = false;
  bool trans = false;
  int64_t ld = 1;
};

MatrixArg matrix_arg(const Group& rows, const Group& cols) {
  if (!rows.ok || !cols.ok) return {};
  if (cols.free || cols.stride == 1) {
    int64_t ld = rows.free ? std::max<int64_t>(1, cols.size) : rows.stride;
    if (ld >= std::max<int64_t>(1, cols.size)) return {true, false, ld};
  }
  if (rows.free || rows.stride == 1) {
    int64_t ld = cols.free ? std::max<int64_t>(1, rows.size) : cols.stride;
    if (ld >= std::max<int64_t>(1, rows.size)) return {true, true, ld};
  }
  return {};
}

float widened(float x) {
  return x;
}
float widened(uint16_t x) {
  return bf16_widen(x);
}

// Copies `src` (strides per letter; f32, or bf16 widened) into a contiguous
// buffer ordered by `order` (adds into it with `add`). A run of the last
// letter is one loop (vectorised where src holds it contiguously too: the
// [b, t, v] -> [t, b, v] permutation of an LSTM's input projection moves
// whole rows), and the runs are spread over the cores: one element at a
// time, this took 4% of the LSTM benchmark's step.
template <typename T>
void gather_to(const T* src, const std::string& order, const std::map<char, int64_t>& size,
               const std::map<char, int64_t>& src_stride, float* dst, bool add = false) {
  const size_t r = order.size();
  if (r == 0) {
    dst[0] = add ? dst[0] + widened(src[0]) : widened(src[0]);
    return;
  }
  std::vector<int64_t> n(r), st(r);
  int64_t runs = 1;
  for (size_t i = 0; i < r; ++i) {
    n[i] = size.at(order[i]);
    st[i] = src_stride.at(order[i]);
    if (i + 1 < r) runs *= n[i];
  }
  const int64_t width = n[r - 1], step = st[r - 1];
  if (width == 0) return;
  parallel_for(runs, grain_for(width), [&](int64_t r0, int64_t r1) {
    // The odometer of run r0's letters, then advanced run by run.
    std::vector<int64_t> idx(r - 1);
    int64_t off = 0;
    for (size_t d = r - 1, rest = static_cast<size_t>(r0); d-- > 0;) {
      idx[d] = static_cast<int64_t>(rest) % n[d];
      rest /= static_cast<size_t>(n[d]);
      off += idx[d] * st[d];
    }
    for (int64_t run = r0; run < r1; ++run) {
      const T* s = src + off;
      float* out = dst + run * width;
      if (step == 1 && !add)
        for (int64_t j = 0; j < width; ++j) out[j] = widened(s[j]);
      else if (step == 1)
        for (int64_t j = 0; j < width; ++j) out[j] += widened(s[j]);
      else
        for (int64_t j = 0; j < width; ++j)
          out[j] = add ? out[j] + widened(s[j * step]) : widened(s[j * step]);
      for (size_t d = r - 1; d-- > 0;) {
        off += st[d];
        if (++idx[d] < n[d]) break;
        off -= st[d] * n[d];
        idx[d] = 0;
      }
    }
  });
}

Operand operand_of(const Tensor& t, const std::string& term) {
  Operand op;
  if (t.dtype() == DType::BF16)
    op.half = t.data<uint16_t>();
  else
    op.data = t.f32();
  op.stride = letter_strides(term, t.shape());
  return op;
}

// The matrix at element offset `at` of an operand, as a product reads it.
GemmOperand gemm_operand(const Operand& op, int64_t at, const MatrixArg& m) {
  return {op.data ? op.data + at : nullptr, op.half ? op.half + at : nullptr, m.ld, m.trans};
}
GemmOperand transposed(GemmOperand g) {
  g.trans = !g.trans;
  return g;
}

// Copies `op` into `buf` with its letters in `order` (a bf16 operand is
// widened whole then: weights held in bf16 are laid out as matrices, so
// this is the rare case) and makes `op` read it.
void to_canonical(Operand& op, const std::string& order, const std::map<char, int64_t>& size,
                  std::vector<float>& buf) {
  Shape shape;
  for (char c : order) shape.push_back(size.at(c));
  buf.resize(static_cast<size_t>(numel(shape)));
  if (op.half)
    gather_to(op.half, order, size, op.stride, buf.data());
  else
    gather_to(op.data, order, size, op.stride, buf.data());
  op.data = buf.data();
  op.half = nullptr;
  op.stride = letter_strides(order, shape);
}

// The product of `e` over in[0] and in[1] into `out`; `qa` and `qb`, when
// given, are the compact copies of the operands' storage (QuantizedEinsum's
// weight), which a one-row product reads when this product's matrix is that
// whole operand (sgemm checks the shape).
void run_einsum(const EinsumAttrs& e, std::span<Tensor* const> in, Tensor& out,
                const KernelContext& ctx, const QuantizedMatrix* qa_in,
                const QuantizedMatrix* qb_in) {
  std::map<char, int64_t> size;
  for (size_t i = 0; i < e.a.size(); ++i) size[e.a[i]] = in[0]->shape()[i];
  for (size_t i = 0; i < e.b.size(); ++i) size[e.b[i]] = in[1]->shape()[i];

  std::string batch, m, nn, k;
  for (char c : e.out) {
    bool ina = e.a.find(c) != std::string::npos, inb = e.b.find(c) != std::string::npos;
    (ina && inb ? batch : ina ? m : nn) += c;
  }
  for (char c : e.a)
    if (e.out.find(c) == std::string::npos) k += c;

  Operand a = operand_of(*in[0], e.a), b = operand_of(*in[1], e.b);
  std::map<char, int64_t> c_stride = letter_strides(e.out, out.shape());

  // Copy an operand to a canonical layout when its letters do not form a matrix.
  std::vector<float> a_copy, b_copy, c_copy;
  MatrixArg ma = matrix_arg(group_of(m, size, a.stride), group_of(k, size, a.stride));
  if (!ma.ok) {
    to_canonical(a, batch + m + k, size, a_copy);
    ma = matrix_arg(group_of(m, size, a.stride), group_of(k, size, a.stride));
  }
  MatrixArg mb = matrix_arg(group_of(k, size, b.stride), group_of(nn, size, b.stride));
  if (!mb.ok) {
    to_canonical(b, batch + k + nn, size, b_copy);
    mb = matrix_arg(group_of(k, size, b.stride), group_of(nn, size, b.stride));
  }
  float* c_data = out.f32();
  MatrixArg mc = matrix_arg(group_of(m, size, c_stride), group_of(nn, size, c_stride));
  bool c_transposed = false;
  if (!mc.ok || mc.trans) {
    MatrixArg mct = matrix_arg(group_of(nn, size, c_stride), group_of(m, size, c_stride));
    if (mct.ok && !mct.trans) {
      mc = mct;
      c_transposed = true;
    } else {
      // Compute into [batch, m, n] and permute into the output afterwards.
      std::string order = batch + m + nn;
      int64_t total = 1;
      Shape s;
      for (char ch : order) total *= size.at(ch), s.push_back(size.at(ch));
      c_copy.resize(static_cast<size_t>(total));
      c_data = c_copy.data();
      c_stride = letter_strides(order, s);
      mc = matrix_arg(group_of(m, size, c_stride), group_of(nn, size, c_stride));
    }
  }

  const int64_t M = group_of(m, size, c_stride).size;
  const int64_t N = group_of(nn, size, c_stride).size;
  const int64_t K = group_of(k, size, a.stride).size;
  const size_t nb = batch.size();
  std::vector<int64_t> bn(nb), bsa(nb), bsb(nb), bsc(nb), idx(nb, 0);
  int64_t batches = 1;
  for (size_t i = 0; i < nb; ++i) {
    char ch = batch[i];
    bn[i] = size.at(ch);
    bsa[i] = a.stride.at(ch);
    bsb[i] = b.stride.at(ch);
    bsc[i] = c_stride.at(ch);
    batches *= bn[i];
  }
  // Accumulating (a fused gradient sum): BLAS adds into the output, or the
  // permuted product is added after.
  const float beta = ctx.accumulate && c_copy.empty() ? 1.0f : 0.0f;
  // A compact copy describes its operand only where it is read in place.
  const QuantizedMatrix* qa = a_copy.empty() ? qa_in : nullptr;
  const QuantizedMatrix* qb = b_copy.empty() ? qb_in : nullptr;
  if (M > 0 && N > 0) {
    int64_t oa = 0, ob = 0, oc = 0;
    for (int64_t t = 0; t < batches; ++t) {
      const CompactOperands compact{oa == 0 ? qa : nullptr, ob == 0 ? qb : nullptr};
      if (a.half || b.half) {
        // A weight held in bf16: widened panel by panel (bf16_gemm.h).
        const GemmOperand ga = gemm_operand(a, oa, ma), gb = gemm_operand(b, ob, mb);
        if (!c_transposed)
          gemm_widening(M, N, K, ga, gb, c_data + oc, mc.ld, beta);
        else  // C^T (N x M) = op(B)^T op(A)^T.
          gemm_widening(N, M, K, transposed(gb), transposed(ga), c_data + oc, mc.ld, beta);
      } else if (!c_transposed) {
        sgemm(ma.trans, mb.trans, M, N, K, a.data + oa, ma.ld, b.data + ob, mb.ld, c_data + oc,
              mc.ld, 1.0f, beta, INT_MAX, compact);
      } else {
        // C^T (N x M) = op(B)^T op(A)^T.
        sgemm(!mb.trans, !ma.trans, N, M, K, b.data + ob, mb.ld, a.data + oa, ma.ld, c_data + oc,
              mc.ld, 1.0f, beta, INT_MAX, {compact.b, compact.a});
      }
      for (size_t d = nb; d-- > 0;) {
        oa += bsa[d], ob += bsb[d], oc += bsc[d];
        if (++idx[d] < bn[d]) break;
        oa -= bsa[d] * bn[d], ob -= bsb[d] * bn[d], oc -= bsc[d] * bn[d];
        idx[d] = 0;
      }
    }
  }
  if (!c_copy.empty()) {
    // Permute [batch, m, n] into the output's letter order.
    gather_to(c_copy.data(), e.out, size, c_stride, out.f32(), ctx.accumulate);
  }
}

void einsum_kernel(const Node& node, std::span<Tensor* const> in, Tensor& out,
                   const KernelContext& ctx) {
  run_einsum(node.attr<EinsumAttrs>(), in, out, ctx, nullptr, nullptr);
}

// The weight's compact copy, held with its storage (Tensor::quantized, made
// by quantize_weights), read by the one-row products; larger products, and a
// block without a copy of the graph's format (one made before
// quantize_weights on a mesh, or a weight the partitioner resharded), read
// the f32 values, which hold the same rounded numbers.
void quantized_einsum_kernel(const Node& node, std::span<Tensor* const> in, Tensor& out,
                             const KernelContext& ctx) {
  const EinsumAttrs& e = node.attr<EinsumAttrs>();
  const QuantizedMatrix* copy = in[size_t(e.compact_operand)]->quantized();
  if (copy != nullptr && copy->dtype != e.compact_format) copy = nullptr;
  run_einsum(e, in, out, ctx, e.compact_operand == 0 ? copy : nullptr,
             e.compact_operand == 1 ? copy : nullptr);
}

// An operand held in bf16 (a frozen weight) takes no gradient; the other
// operand's gradient reads it as bf16 (dX = dY W^T over the bf16 W).
std::vector<Value> einsum_vjp(Graph& g, int id, Value dy) {
  const Node& n = g.node(id);
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  Value a = g.value(n.inputs[0]), b = g.value(n.inputs[1]);
  const bool a_frozen = a.dtype() == DType::BF16, b_frozen = b.dtype() == DType::BF16;
  return {a_frozen ? Value{} : ops::einsum(e.out + "," + e.b + "->" + e.a, dy, b),
          b_frozen ? Value{} : ops::einsum(e.a + "," + e.out + "->" + e.b, a, dy)};
}

// Letters carry mesh axes: a letter split in either operand stays split (the
// other operand is sliced to match, which is free when it is whole); when the
// operands disagree, the larger operand's split wins. A split contracted
// letter leaves partial sums over its axis. Partial sums of one operand pass
// through, since einsum is linear in each operand.
// `a_first`: a's letters keep their splits.
ShardDecision einsum_rule_keeping(const ShardQuery& q, bool a_first) {
  const EinsumAttrs& e = q.node.attr<EinsumAttrs>();
  const Sharding& sa = q.inputs[0];
  const Sharding& sb = q.inputs[1];
  const bool a_larger = a_first;
  std::map<char, int> axis;
  auto axis_in = [](const std::string& term, const Sharding& s, char c) {
    size_t i = term.find(c);
    return i == std::string::npos ? -1 : s.dims[i];
  };
  std::string letters = e.a + e.b;
  // Letters of the larger operand first, so that it keeps its splits.
  if (!a_larger) letters = e.b + e.a;
  std::vector<int> used;
  for (char c : letters) {
    if (axis.count(c)) continue;
    int xa = axis_in(e.a, sa, c), xb = axis_in(e.b, sb, c);
    int x = a_larger ? (xa >= 0 ? xa : xb) : (xb >= 0 ? xb : xa);
    if (x >= 0 && overlaps_any(used, x)) x = -1;
    axis[c] = x;
    if (x >= 0) used.push_back(x);
  }
  auto layout = [&](const std::string& term) {
    std::vector<int> dims;
    for (char c : term) dims.push_back(axis[c]);
    return dims;
  };
  auto free_of = [&](int x) { return !overlaps_any(used, x); };
  // One operand's partial sums may pass if the other is whole over those axes.
  std::vector<int> partial;
  Sharding ra{layout(e.a), {}}, rb{layout(e.b), {}};
  if (partial_sum(sa) && sb.partial.empty() &&
      std::all_of(sa.partial.begin(), sa.partial.end(), free_of)) {
    ra.partial = partial = sa.partial;
  } else if (partial_sum(sb) && sa.partial.empty() &&
             std::all_of(sb.partial.begin(), sb.partial.end(), free_of)) {
    rb.partial = partial = sb.partial;
  }
  for (char c : e.a)
    if (e.out.find(c) == std::string::npos) add_partial(partial, axis[c]);
  return {{ra, rb}, Sharding{layout(e.out), partial}};
}

ShardDecision einsum_rule(const ShardQuery& q) {
  return einsum_rule_keeping(
      q, numel(input_shape(q.graph, q.node, 0)) >= numel(input_shape(q.graph, q.node, 1)));
}

// The held weight keeps its layout whatever the sizes: its blocks are where
// the compact copies are (a resharded weight would be read as f32).
ShardDecision quantized_einsum_rule(const ShardQuery& q) {
  return einsum_rule_keeping(q, q.node.attr<EinsumAttrs>().compact_operand == 0);
}

// One loop per letter: letters of the output are parallel, the others are
// contracted (split: partial sums).
LoopNest einsum_loops(const Graph& g, const Node& n) {
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  LoopNest nest;
  std::map<char, int> loop_of;
  auto loop = [&](char c, int64_t extent) {
    auto [it, fresh] = loop_of.emplace(c, 0);
    if (fresh)
      it->second = nest.add({extent, e.out.find(c) == std::string::npos ? Loop::Kind::Reduction
                                                                        : Loop::Kind::Parallel});
    return it->second;
  };
  for (int k = 0; k < 2; ++k) {
    const std::string& term = k == 0 ? e.a : e.b;
    const Shape& s = input_shape(g, n, k);
    std::vector<int> dims;
    for (size_t i = 0; i < term.size(); ++i) dims.push_back(loop(term[i], s[i]));
    nest.inputs.push_back(dims);
  }
  for (char c : e.out) nest.output.push_back(loop_of.at(c));
  return nest;
}

// 2 flops per term of the sum: twice the product of every letter's extent.
// Both operands are packed (the output is written in place).
OpCost einsum_cost(const Node& n, const CostShapes& s) {
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  std::map<char, double> extent;
  for (size_t i = 0; i < e.a.size(); ++i) extent[e.a[i]] = double(s.inputs[0][i]);
  for (size_t i = 0; i < e.b.size(); ++i) extent[e.b[i]] = double(s.inputs[1][i]);
  double terms = 1;
  for (const auto& [c, x] : extent) terms *= x;
  const double operands = 4 * (elements(s.inputs[0]) + elements(s.inputs[1]));
  return {.flops = 2 * terms,
          .bytes = operands + 4 * elements(s.output),
          .gemm = true,
          .packed_bytes = operands};
}

ShapeAndType quantized_einsum_infer(const Graph& g, const Node& n) {
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  AS_CHECK(
      (e.compact_operand == 0 || e.compact_operand == 1) && e.compact_format != WeightsDType::F32,
      "internal: a quantized einsum '", e.equation(),
      "' needs a compact operand (0 or 1) held in bf16 or int8");
  return einsum_infer(g, n);
}

// A weight held for decoding takes no gradient: its f32 values are rounded
// ones, and training them would leave the compact copy stale.
std::vector<Value> quantized_einsum_vjp(Graph& g, int id, Value) {
  const Node& n = g.node(id);
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  const Node& w = g.node(n.inputs[size_t(e.compact_operand)]);
  fail("gradients: weight '", w.is_leaf() ? w.leaf().name : std::string("?"), "' is held in ",
       weights_dtype_name(e.compact_format),
       " for decoding (quantize_weights), which has no gradient; train on f32 weights (drop the "
       "QuantizedWeights, or quantize after training)");
}

// Einsum's work, with the weight read in its format when the product has
// one row for each of its output channels (a decode step's matrix-vector
// product, which packs nothing); larger products read its f32 values.
OpCost quantized_einsum_cost(const Node& n, const CostShapes& s) {
  OpCost c = einsum_cost(n, s);
  const EinsumAttrs& e = n.attr<EinsumAttrs>();
  const int w = e.compact_operand;
  const std::string& wt = w == 0 ? e.a : e.b;
  const std::string& xt = w == 0 ? e.b : e.a;
  double rows = 1, channels = 1;
  for (size_t i = 0; i < xt.size(); ++i)
    if (wt.find(xt[i]) == std::string::npos && e.out.find(xt[i]) != std::string::npos)
      rows *= double(s.inputs[size_t(1 - w)][i]);
  for (size_t i = 0; i < wt.size(); ++i)
    if (e.out.find(wt[i]) != std::string::npos) channels *= double(s.inputs[size_t(w)][i]);
  if (rows != 1) return c;
  const double weight = elements(s.inputs[size_t(w)]);
  const double scales = e.compact_format == WeightsDType::Int8 ? 4 * channels : 0;
  c.bytes += weight * (weights_dtype_bytes(e.compact_format) - 4) + scales;
  c.packed_bytes = 0;
  return c;
}

}  // namespace

void register_einsum_op(std::vector<OpDef>& t) {
  t[size_t(Op::Einsum)] = {.name = "einsum",
                           .infer = einsum_infer,
                           .kernel = einsum_kernel,
                           .vjp = einsum_vjp,
                           .shard = einsum_rule,
                           .loops = einsum_loops,
                           .cost = einsum_cost,
                           .reads_bf16 = 0b11,
                           .accumulates = true,
                           .makes_weight_gradient = true};
  t[size_t(Op::QuantizedEinsum)] = {.name = "quantized_einsum",
                                    .infer = quantized_einsum_infer,
                                    .kernel = quantized_einsum_kernel,
                                    .vjp = quantized_einsum_vjp,
                                    .shard = quantized_einsum_rule,
                                    .loops = einsum_loops,
                                    .cost = quantized_einsum_cost,
                                    .accumulates = true};
}

}  // namespace autoshard
