// Keras's BatchNormalization and GroupNormalization, composed from
// reductions and elementwise ops (so that the planner splits them like any
// reduction: a batch split leaves partial sums of the statistics, which the
// partitioner adds across devices; a channel split needs nothing).
//
// Weight paths follow Keras: "<layer>.gamma", "<layer>.beta", and for
// BatchNormalization the non-trainable "<layer>.moving_mean" and
// "<layer>.moving_variance" (shape [channels]).
#pragma once

#include <string>

#include "autoshard/nn/layers.h"

namespace autoshard {

struct BatchNormalizationOptions {
  AUTOSHARD_OPTION(int64_t, axis, -1)  // the channel axis (negative: from the end)
  AUTOSHARD_OPTION(double, momentum, 0.99)
  AUTOSHARD_OPTION(double, epsilon, 1e-3)
  AUTOSHARD_OPTION(bool, center, true)
  AUTOSHARD_OPTION(bool, scale, true)
  AUTOSHARD_OPTION(Initializer, beta_initializer, Initializer::zeros())
  AUTOSHARD_OPTION(Initializer, gamma_initializer, Initializer::ones())
  AUTOSHARD_OPTION(Initializer, moving_mean_initializer, Initializer::zeros())
  AUTOSHARD_OPTION(Initializer, moving_variance_initializer, Initializer::ones())
  AUTOSHARD_OPTION(std::string, name, "")
};

// Training: y = gamma (x - mean) / sqrt(var + epsilon) + beta with the
// batch's mean and biased variance over every axis but `axis` (the whole
// batch's, however the batch is split over devices), and the moving
// statistics updated in place by the step: moving = moving * momentum +
// batch * (1 - momentum) (Keras 3: the biased variance). Inference (evaluate,
// predict): the moving statistics instead.
class BatchNormalization : public Layer {
 public:
  explicit BatchNormalization(BatchNormalizationOptions options = {});
};

struct GroupNormalizationOptions {
  AUTOSHARD_OPTION(int64_t, groups, 32)
  AUTOSHARD_OPTION(double, epsilon, 1e-3)
  AUTOSHARD_OPTION(bool, center, true)
  AUTOSHARD_OPTION(bool, scale, true)
  AUTOSHARD_OPTION(Initializer, beta_initializer, Initializer::zeros())
  AUTOSHARD_OPTION(Initializer, gamma_initializer, Initializer::ones())
  AUTOSHARD_OPTION(std::string, name, "")
};

// Channels last (Keras's axis=-1): the channels split into `groups` groups
// of channels / groups (which must divide), each example normalised per
// group over its positions and the group's channels, then gamma and beta
// per channel. groups = channels is InstanceNormalization, 1 a layer norm
// over everything.
class GroupNormalization : public Layer {
 public:
  explicit GroupNormalization(GroupNormalizationOptions options = {});
};

}  // namespace autoshard
