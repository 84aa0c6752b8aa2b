// Keras's sample weights (fit's sample_weight and class_weight, compile's
// weighted_metrics) on the engine's losses and metrics. The weights travel
// with the targets, as one more entry of their last axis, so that they are
// split over the batch like the targets and no step needs another input:
//
//   targets [..., k] f32, weights [...]  ->  [..., k + 1]: targets, then weight
//   class ids [...] (sparse crossentropy) ->  [..., classes + 1]: one-hot, weight
//
//   model.compile(opt, losses::sample_weighted("mse"),
//                 {metrics::without_weights(metrics::mean_absolute_error(), false)});
#pragma once

#include <string>

#include "autoshard/nn/losses.h"
#include "autoshard/nn/metrics.h"

namespace autoshard {

namespace losses {
// Loss `kind` (a name by_name knows) of packed targets: Keras's
// "sum_over_batch_size" with sample_weight (keras/src/losses/loss.py,
// reduce_weighted_values): the weighted values' sum over the number of
// values, not over the weights' sum. Weights per example broadcast over its
// values (an example's time steps, its elements for an error).
Loss sample_weighted(const std::string& kind, CrossentropyOptions options = {}, double delta = 1.0);
// The loss of a masked output (autoshard/nn/masking.h): Keras's output
// mask as sample weights, so the mean is over the kept steps. `loss` must be
// one of the losses above (by_name, a class, sample_weighted).
Value masked(const Loss& loss, Value predictions, Value targets, Value mask);
}  // namespace losses

namespace metrics {
// `m` on packed targets, the weights left out; `class_ids`: the targets are
// class ids (packed one-hot), given to `m` as i32 ids.
Metric without_weights(Metric m, bool class_ids);
// Keras's weighted metric: what each example adds to `m`'s sums, times its
// weight (a weighted mean: sum w v / sum w; weighted confusion counts).
Metric sample_weighted(Metric m, bool class_ids);
// What a batch of a masked output adds to the sums of a mean metric
// (Metric::mean): Keras's MeanMetricWrapper.update_state takes the mask of
// the predictions as sample weights (keras/src/metrics/reduction_metrics.py),
// so each step [batch, time] counts with its mask's weight and a masked step
// not at all. `mask` holds the predictions' leading dimensions; `targets`
// those too (any sample weights packed in them apply as well). As Keras's
// reduce_to_samplewise_values, each example adds its mean over the steps.
Metric::Sums masked_sums(const Metric& m, const Tensor& predictions, const Tensor& targets,
                         const Tensor& mask);
}  // namespace metrics

}  // namespace autoshard
