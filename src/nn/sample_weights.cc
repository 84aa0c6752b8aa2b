#include "autoshard/nn/sample_weights.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "nn/loss_values.h"

namespace autoshard {

namespace {

// x without the last `drop` entries (or, with keep_last, only the last one)
// of its last axis: Pad's negative sizes crop.
Value crop_last(Value x, int64_t drop, bool keep_last) {
  std::vector<int64_t> lo(x.rank(), 0), hi(x.rank(), 0);
  if (keep_last)
    lo.back() = -(x.dim(-1) - 1);
  else
    hi.back() = -drop;
  return ops::pad(x, lo, hi);
}

Value mean_of_all(Value x) {
  std::vector<int64_t> axes;
  for (int i = 0; i < x.rank(); ++i) axes.push_back(i);
  return axes.empty() ? x : ops::reduce_mean(x, axes);
}

}  // namespace

namespace losses {

Loss sample_weighted(const std::string& kind, CrossentropyOptions options, double delta) {
  by_name(kind);  // an unknown name is an error now
  Loss mean = [=](Value p, Value packed) {
    AS_CHECK(packed.dtype() == DType::F32 && packed.rank() >= 1 && packed.dim(-1) >= 2,
             "sample-weighted ", kind, ": targets must carry their weights (f32 [..., k + 1]), ",
             "got ", dtype_name(packed.dtype()), shape_str(packed.shape()));
    Shape per_example = packed.shape();
    per_example.pop_back();
    Value weights = ops::reshape(crop_last(packed, 0, true), per_example);
    Value t = crop_last(packed, 1, false);  // one-hot for the sparse crossentropy
    Value values = loss_values(kind, options, delta, p, t);
    AS_CHECK(values.rank() >= weights.rank(), "sample-weighted ", kind, ": weights ",
             shape_str(weights.shape()), " for values ", shape_str(values.shape()));
    // Each example's weight over its values (Keras's squeeze_or_expand_to_same_rank).
    Shape spread = weights.shape();
    while (spread.size() < size_t(values.rank())) spread.push_back(1);
    return mean_of_all(values * ops::broadcast_to(ops::reshape(weights, spread), values.shape()));
  };
  return KerasLoss{mean, kind, options, delta, true};
}

// keras/src/losses/loss.py, Loss.__call__ and apply_mask: the output's mask
// becomes the sample weights (times any given), scaled by total / (valid +
// epsilon), so that "sum_over_batch_size" averages over the kept steps:
// sum(w m v) / (sum(m) + 1e-7) for values per step (per element: each
// step's mean over them).
Value masked(const Loss& loss, Value p, Value t, Value mask) {
  const KerasLoss* k = loss.target<KerasLoss>();
  AS_CHECK(k != nullptr,
           "a masked output (Embedding mask_zero, Masking) needs one of Keras's built-in losses "
           "(by name or class) to leave its masked steps out; this loss is another function");
  Value steps = mask;  // each step's weight
  if (k->packed) {
    Shape per_example = t.shape();
    per_example.pop_back();
    Value weights = ops::reshape(crop_last(t, 0, true), per_example);
    t = crop_last(t, 1, false);
    AS_CHECK(weights.rank() <= mask.rank(), "sample weights ", shape_str(weights.shape()),
             " for a mask ", shape_str(mask.shape()));
    Shape spread = weights.shape();
    while (spread.size() < size_t(mask.rank())) spread.push_back(1);
    steps = mask * ops::broadcast_to(ops::reshape(weights, spread), mask.shape());
  }
  const bool ids = k->kind == "sparse_categorical_crossentropy" && !k->packed;
  Value values = ids ? class_id_values(k->options.from_logits, p, t)
                     : loss_values(k->kind, k->options, k->delta, p, t);
  AS_CHECK(values.rank() >= mask.rank() &&
               std::equal(mask.shape().begin(), mask.shape().end(), values.shape().begin()),
           "a mask ", shape_str(mask.shape()), " for loss values ", shape_str(values.shape()));
  Shape spread = mask.shape();
  while (spread.size() < size_t(values.rank())) spread.push_back(1);
  Value weighted = values * ops::broadcast_to(ops::reshape(steps, spread), values.shape());
  // mean(w v) * total / (valid + eps), total the mask's elements.
  const double total = double(std::max<int64_t>(1, numel(mask.shape())));
  return mean_of_all(weighted) / (mean_of_all(mask) + ops::constant(*p.graph, {}, 1e-7 / total));
}

}  // namespace losses

namespace metrics {

namespace {

struct Unpacked {
  Tensor targets;
  std::vector<float> weights;  // one per row of `targets`' leading axes
};

// Packed targets [..., k + 1] -> the targets [..., k] (for class ids, sent
// one-hot: i32 [...], the argmax) and the weights.
Unpacked unpack(const Tensor& packed, bool class_ids) {
  AS_CHECK(packed.dtype() == DType::F32 && packed.rank() >= 1 && packed.shape().back() >= 2,
           "a sample-weighted metric needs targets that carry their weights, got ",
           dtype_name(packed.dtype()), shape_str(packed.shape()));
  const int64_t width = packed.shape().back(), k = width - 1, rows = packed.numel() / width;
  Shape shape = packed.shape();
  if (class_ids)
    shape.pop_back();
  else
    shape.back() = k;
  Unpacked u{Tensor(shape, class_ids ? DType::I32 : DType::F32), std::vector<float>(rows)};
  const float* src = packed.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = src + r * width;
    if (class_ids)
      u.targets.i32()[r] = static_cast<int32_t>(std::max_element(row, row + k) - row);
    else
      std::memcpy(u.targets.f32() + r * k, row, k * sizeof(float));
    u.weights[r] = row[k];
  }
  return u;
}

// Row r of x's leading axis (its first dimension), as a batch of one.
Tensor row_of(const Tensor& x, int64_t r) {
  Shape shape = x.shape();
  const int64_t n = x.numel() / shape[0];
  shape[0] = 1;
  Tensor out(shape, x.dtype());
  std::memcpy(static_cast<char*>(out.raw()),
              static_cast<const char*>(x.raw()) + r * n * dtype_size(x.dtype()),
              n * dtype_size(x.dtype()));
  return out;
}

// Rows `keep` of x, its leading `lead` dimensions flattened into rows:
// [keep.size(), the dimensions after them].
Tensor rows_at(const Tensor& x, int lead, const std::vector<int64_t>& keep) {
  Shape shape(x.shape().begin() + lead, x.shape().end());
  const int64_t row = numel(shape) * int64_t(dtype_size(x.dtype()));
  shape.insert(shape.begin(), int64_t(keep.size()));
  Tensor out(shape, x.dtype());
  for (size_t i = 0; i < keep.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw()) + int64_t(i) * row,
                static_cast<const char*>(x.raw()) + keep[i] * row, row);
  return out;
}

bool leads_with(const Tensor& x, const Tensor& mask) {
  return x.rank() >= mask.rank() &&
         std::equal(mask.shape().begin(), mask.shape().end(), x.shape().begin());
}

}  // namespace

Metric::Sums masked_sums(const Metric& m, const Tensor& p, const Tensor& t, const Tensor& mask) {
  AS_CHECK(m.mean, "metric ", m.name, ": only a mean metric leaves masked steps out");
  AS_CHECK(mask.dtype() == DType::F32 && mask.rank() >= 1 && leads_with(p, mask), "metric ", m.name,
           ": a mask ", shape_str(mask.shape()), " for predictions ", shape_str(p.shape()));
  AS_CHECK(leads_with(t, mask), "metric ", m.name, ": the targets ", shape_str(t.shape()),
           " of a masked output must have its steps ", shape_str(mask.shape()),
           " as their leading dimensions");
  const int64_t steps = mask.dim(0) > 0 ? mask.numel() / mask.dim(0) : 1;
  // The steps by their weight (a mask is 0 or 1): the metric runs once on
  // each weight's steps, and its sums add up times that weight.
  std::map<float, std::vector<int64_t>> by_weight;
  for (int64_t r = 0; r < mask.numel(); ++r)
    if (mask.f32()[r] != 0) by_weight[mask.f32()[r]].push_back(r);
  Metric::Sums total;
  for (const auto& [weight, keep] : by_weight) {
    const Metric::Sums one =
        m.accumulate(rows_at(p, mask.rank(), keep), rows_at(t, mask.rank(), keep));
    if (total.empty()) total.assign(one.size(), 0.0);
    // Keras averages each example's weighted values over its steps.
    for (size_t i = 0; i < one.size(); ++i) total[i] += double(weight) / double(steps) * one[i];
  }
  if (total.empty() && mask.numel() > 0)  // every step masked: sums of the right size, all 0
    total.assign(m.accumulate(rows_at(p, mask.rank(), {0}), rows_at(t, mask.rank(), {0})).size(),
                 0.0);
  return total;
}

Metric without_weights(Metric m, bool class_ids) {
  auto inner = m.accumulate;
  m.accumulate = [inner, class_ids](const Tensor& p, const Tensor& packed) {
    return inner(p, unpack(packed, class_ids).targets);
  };
  return m;
}

Metric sample_weighted(Metric m, bool class_ids) {
  const Metric plain = m;  // the metric on its own targets, which this one unpacks
  m.accumulate = [plain, class_ids](const Tensor& p, const Tensor& packed) {
    const Unpacked u = unpack(packed, class_ids);
    const int64_t examples = p.shape().at(0);
    if (int64_t(u.weights.size()) != examples) {
      // A weight per time step of a sequence output (one per example is
      // spread over its steps): Keras's reduce_to_samplewise_values weighs
      // each step's value and averages an example's over its steps
      // (keras/src/metrics/reduction_metrics.py), as a mask's weights do.
      AS_CHECK(plain.mean, "metric ", plain.name, ": weights per time step apply to mean ",
               "metrics (Keras's MeanMetricWrapper); weigh its examples instead");
      const int lead = packed.rank() - 1;
      Tensor weights(Shape(packed.shape().begin(), packed.shape().begin() + lead));
      std::copy(u.weights.begin(), u.weights.end(), weights.f32());
      return masked_sums(plain, p, u.targets, weights);
    }
    Metric::Sums total;
    for (int64_t r = 0; r < examples; ++r) {
      const Metric::Sums one = plain.accumulate(row_of(p, r), row_of(u.targets, r));
      if (total.empty()) total.assign(one.size(), 0.0);
      for (size_t i = 0; i < one.size(); ++i) total[i] += double(u.weights[r]) * one[i];
    }
    return total;
  };
  return m;
}

}  // namespace metrics

}  // namespace autoshard
