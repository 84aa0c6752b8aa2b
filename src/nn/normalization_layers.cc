#include "autoshard/nn/normalization_layers.h"

#include <cmath>
#include <tuple>
#include <utility>

#include "autoshard/error.h"
#include "autoshard/ir/ops.h"
#include "autoshard/optim/composed_ops.h"

namespace autoshard {

namespace {

Value single_input(const std::vector<Value>& inputs, const std::string& layer) {
  AS_CHECK(inputs.size() == 1, "layer ", layer, " takes one input, got ", inputs.size());
  return inputs[0];
}

Value scalar(Graph& g, double v) {
  return ops::constant(g, {}, v);
}

// ---- BatchNormalization ----
class BatchNormImpl : public LayerImpl {
 public:
  explicit BatchNormImpl(BatchNormalizationOptions o)
      : LayerImpl(o.name_.empty() ? default_layer_name("batch_normalization") : o.name_),
        o_(std::move(o)) {
    AS_CHECK(o_.momentum_ >= 0 && o_.momentum_ <= 1, "BatchNormalization: momentum must be in ",
             "[0, 1], got ", o_.momentum_);
    AS_CHECK(std::isfinite(o_.epsilon_) && o_.epsilon_ > 0,
             "BatchNormalization: epsilon must be positive, got ", o_.epsilon_);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = single_input(inputs, name());
    const int rank = x.rank();
    const int64_t axis = o_.axis_ < 0 ? o_.axis_ + rank : o_.axis_;
    AS_CHECK(rank >= 2 && axis >= 1 && axis < rank, "BatchNormalization ", name(), ": axis ",
             o_.axis_, " is not a feature axis of an input of shape ", shape_str(x.shape()));
    const int64_t channels = x.dim(static_cast<int>(axis));
    std::vector<int64_t> reduce;
    Shape keep(rank, 1);  // [1, ..., channels, ..., 1]: the statistics broadcast over x
    for (int i = 0; i < rank; ++i)
      if (i != axis) reduce.push_back(i);
    keep[axis] = channels;
    auto spread = [&](Value v) { return ops::reshape(v, keep); };

    // Declared in Keras's order: gamma, beta, moving_mean, moving_variance.
    Value gamma, beta;
    if (o_.scale_) gamma = t.weight("gamma", {channels}, o_.gamma_initializer_);
    if (o_.center_) beta = t.weight("beta", {channels}, o_.beta_initializer_);
    Value moving_mean = t.weight("moving_mean", {channels}, o_.moving_mean_initializer_, false);
    Value moving_var =
        t.weight("moving_variance", {channels}, o_.moving_variance_initializer_, false);
    Value mean = moving_mean, var = moving_var;
    // Keras 3's BatchNormalization.call: batch statistics only when
    // training and trainable; frozen, it normalises as in inference.
    if (t.training() && !t.frozen()) {
      const Value mask = t.mask(x);
      if (mask.valid()) {
        std::tie(mean, var) = masked_moments(t, x, mask, reduce, axis);
      } else {
        mean = ops::reduce_mean(x, reduce);
        Value centered = x - spread(mean);
        var = ops::reduce_mean(centered * centered, reduce);
      }
      update(moving_mean, mean);
      update(moving_var, var);
    }
    Graph& g = t.graph();
    Value inv = ops::unary(var + scalar(g, o_.epsilon_), UnaryFn::Rsqrt);
    if (o_.scale_) inv = inv * gamma;
    Value shift = ops::scale(mean * inv, -1.0);
    if (o_.center_) shift = shift + beta;
    return x * spread(inv) + spread(shift);
  }

  // Keras's BatchNormalization supports_masking: the mask passes on.
  Value compute_mask(Trace& t, const std::vector<Value>& inputs) override {
    return mask_of_first(t, inputs);
  }

 private:
  // The moments of the kept steps only (keras/src/layers/normalization/
  // batch_normalization.py, _moments with a mask): the mask [batch, time]
  // weighs each position, sum(m x) / (sum m + 1e-7) and sum(m (m x -
  // mean)^2) / (sum m + 1e-7), over the axes but the (last) channel axis.
  std::pair<Value, Value> masked_moments(Trace& t, Value x, Value mask,
                                         const std::vector<int64_t>& reduce, int64_t axis) {
    AS_CHECK(mask.rank() == x.rank() - 1 && axis == x.rank() - 1, "BatchNormalization ", name(),
             ": a mask ", shape_str(mask.shape()), " needs inputs of one more axis, the ",
             "channels last; got ", shape_str(x.shape()), " with axis ", o_.axis_);
    Shape with_channel = mask.shape();
    with_channel.push_back(1);
    const Value m = ops::reshape(mask, with_channel);  // [batch, time, 1]
    const Value weighted = m * x;
    const Value kept = ops::reduce_sum(m, reduce) + scalar(t.graph(), 1e-7);  // [1]
    const Value mean = ops::reduce_sum(weighted, reduce) / kept;              // [channels]
    Shape keep(x.rank(), 1);
    keep[axis] = x.dim(static_cast<int>(axis));
    const Value d = weighted - ops::reshape(mean, keep);
    return {mean, ops::reduce_sum(m * (d * d), reduce) / kept};
  }

  // moving = moving * momentum + batch * (1 - momentum), written in place.
  void update(Value moving, Value batch) {
    composed::assign(moving,
                     ops::scale(moving, o_.momentum_) + ops::scale(batch, 1.0 - o_.momentum_));
  }

  BatchNormalizationOptions o_;
};

// ---- GroupNormalization ----
class GroupNormImpl : public LayerImpl {
 public:
  explicit GroupNormImpl(GroupNormalizationOptions o)
      : LayerImpl(o.name_.empty() ? default_layer_name("group_normalization") : o.name_),
        o_(std::move(o)) {
    AS_CHECK(o_.groups_ >= 1, "GroupNormalization: groups must be positive, got ", o_.groups_);
    AS_CHECK(std::isfinite(o_.epsilon_) && o_.epsilon_ > 0,
             "GroupNormalization: epsilon must be positive, got ", o_.epsilon_);
  }

  Value call(Trace& t, const std::vector<Value>& inputs) override {
    Value x = single_input(inputs, name());
    const int rank = x.rank();
    AS_CHECK(rank >= 2, "GroupNormalization ", name(), " needs [batch, ..., channels], got ",
             shape_str(x.shape()));
    const int64_t channels = x.dim(-1), groups = o_.groups_;
    AS_CHECK(channels % groups == 0, "GroupNormalization ", name(), ": groups (", groups,
             ") must divide the channels (", channels, ")");
    // [b, ..., groups, channels / groups], statistics over every axis but
    // the batch and the group.
    Shape grouped = x.shape();
    grouped.back() = groups;
    grouped.push_back(channels / groups);
    Value xg = ops::reshape(x, grouped);
    std::vector<int64_t> reduce;
    Shape keep = grouped;  // [b, 1, ..., groups, 1]
    for (int i = 1; i <= rank; ++i)
      if (i != rank - 1) reduce.push_back(i), keep[i] = 1;
    Value mean = ops::reshape(ops::reduce_mean(xg, reduce), keep);
    Value centered = xg - mean;
    Value var = ops::reshape(ops::reduce_mean(centered * centered, reduce), keep);
    Value inv = ops::unary(var + scalar(t.graph(), o_.epsilon_), UnaryFn::Rsqrt);
    Value y = ops::reshape(centered * inv, x.shape());
    if (o_.scale_) y = y * t.weight("gamma", {channels}, o_.gamma_initializer_);
    if (o_.center_) y = y + t.weight("beta", {channels}, o_.beta_initializer_);
    return y;
  }

 private:
  GroupNormalizationOptions o_;
};

}  // namespace

BatchNormalization::BatchNormalization(BatchNormalizationOptions o)
    : Layer(std::make_shared<BatchNormImpl>(std::move(o))) {}

GroupNormalization::GroupNormalization(GroupNormalizationOptions o)
    : Layer(std::make_shared<GroupNormImpl>(std::move(o))) {}

}  // namespace autoshard
