#include "autoshard/nn/losses.h"

#include <cmath>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/optim/composed_ops.h"
#include "nn/loss_values.h"

namespace autoshard::losses {

namespace {

// Keras's backend epsilon: probabilities are clipped to [kEpsilon, 1 - kEpsilon].
constexpr double kEpsilon = 1e-7;

std::vector<int64_t> all_axes(Value x) {
  std::vector<int64_t> axes;
  for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  return axes;
}

Value mean_all(Value x) {
  return x.rank() == 0 ? x : ops::reduce_mean(x, all_axes(x));
}

Value scalar(Graph& g, double v) {
  return ops::constant(g, {}, v);
}

void check_same_shape(const char* loss, Value predictions, Value targets) {
  AS_CHECK(targets.dtype() == DType::F32, loss, ": targets must be f32, got ",
           dtype_name(targets.dtype()));
  AS_CHECK(predictions.shape() == targets.shape(), loss, ": targets ", shape_str(targets.shape()),
           " do not match predictions ", shape_str(predictions.shape()));
}

// Keras's checks of the two cross-entropies' targets
// (keras/src/backend/numpy/nn.py, categorical_crossentropy and
// sparse_categorical_crossentropy), with the likely mix-up named: one-hot
// targets given to the sparse loss, class ids to the categorical one.
void check_one_hot_targets(Value predictions, Value targets) {
  const Shape& p = predictions.shape();
  const Shape& t = targets.shape();
  if (p == t || p.empty()) return;
  const int64_t classes = p.back();
  AS_CHECK(Shape(p.begin(), p.end() - 1) != t && (t.empty() || t.back() != 1 || classes == 1),
           "CategoricalCrossentropy: targets ", shape_str(t), " do not match predictions ",
           shape_str(p),
           ": they look like class ids, and this loss takes one-hot targets of "
           "the predictions' shape (use sparse_categorical_crossentropy, or "
           "keras.utils.to_categorical(y, ",
           classes, "))");
}

void check_class_id_targets(Value predictions, Value targets) {
  const Shape& p = predictions.shape();
  const Shape& t = targets.shape();
  AS_CHECK(!p.empty(), "SparseCategoricalCrossentropy: predictions need a class axis, got ",
           shape_str(p));
  if (Shape(p.begin(), p.end() - 1) == t) return;
  AS_CHECK(p != t, "SparseCategoricalCrossentropy: targets ", shape_str(t),
           " do not match predictions ", shape_str(p),
           ": they look one-hot (the predictions' shape), and this loss takes class ids of "
           "shape ",
           shape_str(Shape(p.begin(), p.end() - 1)),
           " (use categorical_crossentropy, or y.argmax(axis=-1))");
  fail("SparseCategoricalCrossentropy: targets ", shape_str(t), " do not match predictions ",
       shape_str(p), " (class ids need the predictions' shape up to the last axis, ",
       shape_str(Shape(p.begin(), p.end() - 1)), ")");
}

void check_options(const char* loss, const CrossentropyOptions& o) {
  AS_CHECK(o.label_smoothing >= 0 && o.label_smoothing <= 1, loss,
           ": label_smoothing must be in [0, 1], got ", o.label_smoothing);
}

// Probabilities over the last axis as Keras takes them: divided by their sum,
// then clipped away from 0 and 1.
Value normalized_probabilities(Value p) {
  const int64_t last = p.rank() - 1;
  Shape keep = p.shape();
  keep.back() = 1;
  Value sum = ops::reshape(ops::reduce_sum(p, {last}), keep);
  return composed::clip(p / sum, kEpsilon, 1 - kEpsilon);
}

Value log(Value x) {
  return ops::unary(x, UnaryFn::Log);
}

}  // namespace

Value class_id_values(bool from_logits, Value p, Value ids) {
  check_class_id_targets(p, ids);
  return ops::cross_entropy(from_logits ? p : log(normalized_probabilities(p)), ids);
}

Value sparse_categorical_crossentropy(Value logits, Value targets) {
  Value per_row = ops::cross_entropy(logits, targets);
  return ops::reduce_mean(per_row, all_axes(per_row));
}

Value mean_squared_error(Value predictions, Value targets) {
  Value d = predictions - targets;
  return ops::reduce_mean(d * d, all_axes(d));
}

// ---- each loss's values: their mean is the loss (Keras's
// "sum_over_batch_size"); sample_weights.cc weights them ----

namespace {

Value categorical_values(const CrossentropyOptions& o, Value p, Value t) {
  check_one_hot_targets(p, t);
  check_same_shape("CategoricalCrossentropy", p, t);
  AS_CHECK(p.rank() >= 1, "CategoricalCrossentropy: predictions need a class axis");
  Graph& g = *p.graph;
  const int64_t classes = p.dim(-1), last = p.rank() - 1;
  if (o.label_smoothing > 0)
    t = ops::scale(t, 1 - o.label_smoothing) +
        scalar(g, o.label_smoothing / static_cast<double>(classes));
  Value log_p = o.from_logits ? ops::log_softmax(p) : log(normalized_probabilities(p));
  return ops::scale(ops::reduce_sum(t * log_p, {last}), -1.0);
}

Value binary_values(const CrossentropyOptions& o, Value p, Value t) {
  check_same_shape("BinaryCrossentropy", p, t);
  Graph& g = *p.graph;
  if (o.label_smoothing > 0)
    t = ops::scale(t, 1 - o.label_smoothing) + scalar(g, 0.5 * o.label_smoothing);
  if (o.from_logits)  // softplus(x) - t x = -(t log s(x) + (1 - t) log(1 - s(x)))
    return ops::unary(p, UnaryFn::Softplus) - t * p;
  Value q = composed::clip(p, kEpsilon, 1 - kEpsilon);
  Value one = scalar(g, 1.0);
  return ops::scale(t * log(q) + (one - t) * log(one - q), -1.0);
}

Value huber_values(double delta, Value p, Value t) {
  check_same_shape("Huber", p, t);
  Value a = ops::unary(p - t, UnaryFn::Abs);
  // q = min(|e|, delta): 0.5 q^2 + delta (|e| - q) is both branches at once.
  Value q = a - ops::relu(a - scalar(*p.graph, delta));
  return ops::scale(q * q, 0.5) + ops::scale(a - q, delta);
}

}  // namespace

Value loss_values(const std::string& kind, const CrossentropyOptions& o, double delta, Value p,
                  Value t) {
  if (kind == "categorical_crossentropy" || kind == "sparse_categorical_crossentropy")
    return categorical_values(o, p, t);
  if (kind == "binary_crossentropy") return binary_values(o, p, t);
  if (kind == "mse" || kind == "mean_squared_error") {
    check_same_shape("MeanSquaredError", p, t);
    Value d = p - t;
    return d * d;
  }
  if (kind == "mae" || kind == "mean_absolute_error") {
    check_same_shape("MeanAbsoluteError", p, t);
    return ops::unary(p - t, UnaryFn::Abs);
  }
  if (kind == "huber") return huber_values(delta, p, t);
  fail("unknown loss '", kind, "'");
}

Loss CategoricalCrossentropy(CrossentropyOptions o) {
  check_options("CategoricalCrossentropy", o);
  return KerasLoss{[o](Value p, Value t) { return mean_all(categorical_values(o, p, t)); },
                   "categorical_crossentropy", o};
}

Loss SparseCategoricalCrossentropy(SparseCrossentropyOptions o) {
  Loss mean = [o](Value p, Value t) {
    AS_CHECK(t.dtype() == DType::I32, "SparseCategoricalCrossentropy: targets must be i32 ",
             "class ids, got ", dtype_name(t.dtype()));
    check_class_id_targets(p, t);
    if (o.from_logits) return sparse_categorical_crossentropy(p, t);
    // -log(q_t) of the normalised, clipped probabilities q: the softmax
    // cross-entropy of log q, whose log-sum-exp is log(sum q) = 0 (up to the
    // clipping) and takes no gradient from the normalisation.
    return sparse_categorical_crossentropy(log(normalized_probabilities(p)), t);
  };
  return KerasLoss{mean, "sparse_categorical_crossentropy", {.from_logits = o.from_logits}};
}

Loss BinaryCrossentropy(CrossentropyOptions o) {
  check_options("BinaryCrossentropy", o);
  return KerasLoss{[o](Value p, Value t) { return mean_all(binary_values(o, p, t)); },
                   "binary_crossentropy", o};
}

Loss MeanSquaredError() {
  Loss mean = [](Value p, Value t) {
    check_same_shape("MeanSquaredError", p, t);
    return mean_squared_error(p, t);
  };
  return KerasLoss{mean, "mse"};
}

Loss MeanAbsoluteError() {
  return KerasLoss{[](Value p, Value t) { return mean_all(loss_values("mae", {}, 1.0, p, t)); },
                   "mae"};
}

Loss Huber(double delta) {
  AS_CHECK(std::isfinite(delta) && delta > 0, "Huber: delta must be positive, got ", delta);
  return KerasLoss{[delta](Value p, Value t) { return mean_all(huber_values(delta, p, t)); },
                   "huber",
                   {},
                   delta};
}

Loss by_name(const std::string& name) {
  if (name == "categorical_crossentropy") return CategoricalCrossentropy();
  if (name == "sparse_categorical_crossentropy") return SparseCategoricalCrossentropy();
  if (name == "binary_crossentropy") return BinaryCrossentropy();
  if (name == "mse" || name == "mean_squared_error") return MeanSquaredError();
  if (name == "mae" || name == "mean_absolute_error") return MeanAbsoluteError();
  if (name == "huber") return Huber();
  fail("unknown loss '", name,
       "' (known: categorical_crossentropy, sparse_categorical_crossentropy, "
       "binary_crossentropy, mse, mae, huber)");
}

}  // namespace autoshard::losses
