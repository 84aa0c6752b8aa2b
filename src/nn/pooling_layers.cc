#include "autoshard/nn/pooling_layers.h"

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/nn/masking.h"

namespace autoshard {
namespace {

std::vector<int64_t> per_dim(std::vector<int64_t> v, int rank, int64_t fallback,
                             const std::string& layer, const char* what) {
  if (v.empty()) v = {fallback};
  if (v.size() == 1) v.assign(rank, v[0]);
  AS_CHECK(static_cast<int>(v.size()) == rank, layer, ": ", what, " needs 1 or ", rank,
           " values, got ", v.size());
  for (int64_t x : v) AS_CHECK(x >= 1, layer, ": ", what, " must be at least 1, got ", x);
  return v;
}

Value one_input(const std::vector<Value>& inputs, int rank, const std::string& who) {
  AS_CHECK(inputs.size() == 1, who, " takes one input, got ", inputs.size());
  AS_CHECK(inputs[0].rank() == rank + 2, who, " needs [batch, ",
           rank == 1   ? "steps"
           : rank == 2 ? "rows, cols"
                       : "depth, rows, cols",
           ", channels], got ", shape_str(inputs[0].shape()));
  return inputs[0];
}

// MaxPooling3D and AveragePooling3D (keras/src/layers/pooling/
// max_pooling3d.py, average_pooling3d.py; BasePooling.call) from the 2-D
// Pool op: each depth slice pooled over rows and cols (slices as batch
// rows), then the result pooled over depth alone (rows and cols flattened
// into one dim of window 1). A window is a box, so its positions inside x
// are (depth positions) x (row and col positions): the mean of the slices'
// means is the box's mean, with 'same' padding too.
Value pool3d_by_planes(Value x, const PoolAttrs& a) {
  const int64_t b = x.dim(0), d = x.dim(1), c = x.dim(4);
  const PoolAttrs plane{a.max,
                        {a.window[1], a.window[2]},
                        {a.strides[1], a.strides[2]},
                        {a.pad_lo[1], a.pad_lo[2]},
                        {a.pad_hi[1], a.pad_hi[2]}};
  Value p = ops::pool(ops::reshape(x, {b * d, x.dim(2), x.dim(3), c}), plane);
  const int64_t rows = p.dim(1), cols = p.dim(2);
  const PoolAttrs depth{
      a.max, {a.window[0], 1}, {a.strides[0], 1}, {a.pad_lo[0], 0}, {a.pad_hi[0], 0}};
  Value q = ops::pool(ops::reshape(p, {b, d, rows * cols, c}), depth);
  return ops::reshape(q, {b, q.dim(1), rows, cols, c});
}

class PoolImpl : public LayerImpl {
 public:
  PoolImpl(bool max, int rank, PoolingOptions o)
      : LayerImpl(layer_name_or_default(o.name_, std::string(max ? "max" : "average") + "_pooling" +
                                                     std::to_string(rank) + "d")),
        max_(max),
        rank_(rank),
        padding_(o.padding_) {
    who_ =
        std::string(max ? "MaxPooling" : "AveragePooling") + std::to_string(rank) + "D " + name();
    window_ = per_dim(o.pool_size_, rank, 2, who_, "pool_size");
    strides_ = o.strides_.empty() ? window_ : per_dim(o.strides_, rank, 1, who_, "strides");
    AS_CHECK(padding_ == "valid" || padding_ == "same", who_,
             ": padding must be 'valid' or 'same', got '", padding_, "'");
  }
  Value call(Trace&, const std::vector<Value>& inputs) override {
    Value x = one_input(inputs, rank_, who_);
    PoolAttrs a{max_, window_, strides_, {}, {}};
    for (int i = 0; i < rank_; ++i) {
      auto [lo, hi] = padding_ == "same" ? ops::same_padding(x.dim(1 + i), window_[i], strides_[i])
                                         : std::pair<int64_t, int64_t>{0, 0};
      AS_CHECK(padding_ == "same" || x.dim(1 + i) >= window_[i], who_, ": a window of ", window_[i],
               " does not fit an input of ", x.dim(1 + i), " with padding 'valid'");
      a.pad_lo.push_back(lo);
      a.pad_hi.push_back(hi);
    }
    return rank_ == 3 ? pool3d_by_planes(x, a) : ops::pool(x, a);
  }

 private:
  bool max_;
  int rank_;
  std::string padding_, who_;
  std::vector<int64_t> window_, strides_;
};

// Global average: a mean over the spatial dims. Global max: one window
// covering them (the Pool op, so its gradient goes to the maximum).
class GlobalPoolImpl : public LayerImpl {
 public:
  GlobalPoolImpl(bool max, int rank, GlobalPoolingOptions o)
      : LayerImpl(layer_name_or_default(o.name_, std::string("global_") +
                                                     (max ? "max" : "average") + "_pooling" +
                                                     std::to_string(rank) + "d")),
        max_(max),
        rank_(rank),
        keepdims_(o.keepdims_) {}
  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = one_input(inputs, rank_,
                        std::string("Global") + (max_ ? "Max" : "Average") + "Pooling" +
                            std::to_string(rank_) + "D " + name());
    // keras/src/layers/pooling/global_average_pooling1d.py: over a masked
    // sequence, the mean of the kept steps (sum x m / sum m).
    if (Value m = t.mask(x); m.valid() && !max_ && rank_ == 1) {
      Value y = ops::reduce_sum(apply_mask(x, m), {1}) /
                ops::reshape(ops::reduce_sum(m, {1}), {x.dim(0), 1});
      return keepdims_ ? ops::reshape(y, {x.dim(0), 1, x.dim(-1)}) : y;
    }
    Shape kept{x.dim(0)};
    std::vector<int64_t> axes;
    for (int i = 0; i < rank_; ++i) kept.push_back(1), axes.push_back(1 + i);
    kept.push_back(x.dim(-1));
    Value y;
    if (max_) {
      // 3-D: depth and rows as one dim of the 2-D op's window.
      Value flat =
          rank_ == 3 ? ops::reshape(x, {x.dim(0), x.dim(1) * x.dim(2), x.dim(3), x.dim(4)}) : x;
      const int flat_rank = rank_ == 3 ? 2 : rank_;
      PoolAttrs a{
          true, {}, {}, std::vector<int64_t>(flat_rank, 0), std::vector<int64_t>(flat_rank, 0)};
      for (int i = 0; i < flat_rank; ++i)
        a.window.push_back(flat.dim(1 + i)), a.strides.push_back(1);
      y = ops::pool(flat, a);
      if (rank_ == 3) y = ops::reshape(y, kept);
    } else {
      y = ops::reshape(ops::reduce_mean(x, axes), kept);
    }
    return keepdims_ ? y : ops::reshape(y, {x.dim(0), x.dim(-1)});
  }

 private:
  bool max_;
  int rank_;
  bool keepdims_;
};

}  // namespace

MaxPooling1D::MaxPooling1D(PoolingOptions o)
    : Layer(std::make_shared<PoolImpl>(true, 1, std::move(o))) {}
MaxPooling2D::MaxPooling2D(PoolingOptions o)
    : Layer(std::make_shared<PoolImpl>(true, 2, std::move(o))) {}
AveragePooling1D::AveragePooling1D(PoolingOptions o)
    : Layer(std::make_shared<PoolImpl>(false, 1, std::move(o))) {}
AveragePooling2D::AveragePooling2D(PoolingOptions o)
    : Layer(std::make_shared<PoolImpl>(false, 2, std::move(o))) {}
MaxPooling3D::MaxPooling3D(PoolingOptions o)
    : Layer(std::make_shared<PoolImpl>(true, 3, std::move(o))) {}
AveragePooling3D::AveragePooling3D(PoolingOptions o)
    : Layer(std::make_shared<PoolImpl>(false, 3, std::move(o))) {}
GlobalAveragePooling3D::GlobalAveragePooling3D(GlobalPoolingOptions o)
    : Layer(std::make_shared<GlobalPoolImpl>(false, 3, std::move(o))) {}
GlobalMaxPooling3D::GlobalMaxPooling3D(GlobalPoolingOptions o)
    : Layer(std::make_shared<GlobalPoolImpl>(true, 3, std::move(o))) {}
GlobalAveragePooling1D::GlobalAveragePooling1D(GlobalPoolingOptions o)
    : Layer(std::make_shared<GlobalPoolImpl>(false, 1, std::move(o))) {}
GlobalAveragePooling2D::GlobalAveragePooling2D(GlobalPoolingOptions o)
    : Layer(std::make_shared<GlobalPoolImpl>(false, 2, std::move(o))) {}
GlobalMaxPooling1D::GlobalMaxPooling1D(GlobalPoolingOptions o)
    : Layer(std::make_shared<GlobalPoolImpl>(true, 1, std::move(o))) {}
GlobalMaxPooling2D::GlobalMaxPooling2D(GlobalPoolingOptions o)
    : Layer(std::make_shared<GlobalPoolImpl>(true, 2, std::move(o))) {}

}  // namespace autoshard
