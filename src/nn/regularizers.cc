#include "autoshard/nn/regularizers.h"

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/optim/composed_ops.h"

namespace autoshard {

namespace {

// Keras's backend.epsilon().
constexpr double kEpsilon = 1e-7;

Value sum_all(Value x) {
  std::vector<int64_t> axes;
  for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  return axes.empty() ? x : ops::reduce_sum(x, axes);
}

Value constant(Graph& g, double v) {
  return ops::constant(g, {}, v);
}

// sqrt(sum(w^2)) over `axes` (negative ones from the end), kept as size-1
// dimensions so that it broadcasts over w.
Value norms(Value w, const std::vector<int64_t>& axes, const char* constraint) {
  std::vector<int64_t> reduce;
  Shape keep = w.shape();
  for (int64_t a : axes) {
    const int64_t axis = a < 0 ? a + w.rank() : a;
    AS_CHECK(axis >= 0 && axis < w.rank(), constraint, ": axis ", a, " is not an axis of a weight ",
             "of shape ", shape_str(w.shape()));
    reduce.push_back(axis);
    keep[axis] = 1;
  }
  Value sq = ops::reduce_sum(w * w, reduce);
  return ops::reshape(ops::unary(sq, UnaryFn::Sqrt), keep);
}

void check_factor(double v, const char* what) {
  AS_CHECK(std::isfinite(v) && v >= 0, what, " must be a finite number >= 0, got ", v);
}

}  // namespace

namespace regularizers {

namespace {
// A named type (not a lambda), so that adds_over_examples can recognise it.
struct L1L2Penalty {
  double l1, l2;
  Value operator()(Value w) const {
    Value total = constant(*w.graph, 0.0);
    if (l1 > 0) total = total + ops::scale(sum_all(ops::unary(w, UnaryFn::Abs)), l1);
    if (l2 > 0) total = total + ops::scale(sum_all(w * w), l2);
    return total;
  }
};
}  // namespace

Trace::Penalty l1_l2(double l1, double l2) {
  check_factor(l1, "L1L2: l1");
  check_factor(l2, "L1L2: l2");
  return L1L2Penalty{l1, l2};
}

bool adds_over_examples(const Trace::Penalty& penalty) {
  return penalty.target<L1L2Penalty>() != nullptr;
}

Trace::Penalty orthogonal(double factor, bool rows) {
  check_factor(factor, "OrthogonalRegularizer: factor");
  return [factor, rows](Value w) {
    AS_CHECK(w.rank() == 2, "OrthogonalRegularizer: the weight must be 2-D, got ",
             shape_str(w.shape()));
    if (!rows) w = ops::transpose(w, {1, 0});
    const int64_t size = w.dim(0);
    AS_CHECK(size >= 2, "OrthogonalRegularizer: needs at least 2 ", rows ? "rows" : "columns",
             ", got ", size);
    // Keras's normalize: each vector over max(its norm, epsilon).
    Value norm = ops::reshape(ops::unary(ops::reduce_sum(w * w, {1}), UnaryFn::Sqrt), {size, 1});
    Value n = w / composed::maximum(norm, constant(*w.graph, kEpsilon));
    Value gram = ops::einsum("ik,jk->ij", n, n);
    // The diagonal (|n_i|^2, never negative) left out of the sum of |n_i . n_j|.
    Value off = sum_all(ops::unary(gram, UnaryFn::Abs)) - sum_all(n * n);
    const double pairs = double(size) * double(size - 1) / 2.0;
    return ops::scale(off, factor * 0.5 / pairs);
  };
}

}  // namespace regularizers

namespace constraints {

Trace::Penalty max_norm(double max_value, std::vector<int64_t> axes) {
  check_factor(max_value, "MaxNorm: max_value");
  return [max_value, axes](Value w) {
    Value norm = norms(w, axes, "MaxNorm");
    Value desired = composed::clip(norm, 0.0, max_value);
    return w * (desired / (norm + constant(*w.graph, kEpsilon)));
  };
}

Trace::Penalty min_max_norm(double min_value, double max_value, double rate,
                            std::vector<int64_t> axes) {
  check_factor(min_value, "MinMaxNorm: min_value");
  check_factor(max_value, "MinMaxNorm: max_value");
  check_factor(rate, "MinMaxNorm: rate");
  AS_CHECK(min_value <= max_value, "MinMaxNorm: min_value ", min_value, " is above max_value ",
           max_value);
  return [=](Value w) {
    Value norm = norms(w, axes, "MinMaxNorm");
    Value desired =
        ops::scale(composed::clip(norm, min_value, max_value), rate) + ops::scale(norm, 1.0 - rate);
    return w * (desired / (norm + constant(*w.graph, kEpsilon)));
  };
}

Trace::Penalty non_neg() {
  return [](Value w) { return ops::relu(w); };
}

Trace::Penalty unit_norm(std::vector<int64_t> axes) {
  return
      [axes](Value w) { return w / (norms(w, axes, "UnitNorm") + constant(*w.graph, kEpsilon)); };
}

}  // namespace constraints

}  // namespace autoshard
