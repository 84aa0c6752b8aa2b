// The values a loss averages (Keras's "sum_over_batch_size"): each
// example's (or time step's) crossentropy, or each element's error, for
// the sample-weighted losses (sample_weights.cc). Internal to nn.
#pragma once

#include <string>

#include "autoshard/nn/losses.h"

namespace autoshard::losses {

// The values of loss `kind` (a name by_name knows; the sparse categorical
// crossentropy takes one-hot f32 targets here) whose mean is the loss:
// [...] for the crossentropies over classes, the predictions' shape for the
// others.
Value loss_values(const std::string& kind, const CrossentropyOptions& options, double delta,
                  Value predictions, Value targets);

// Each row's sparse categorical crossentropy [...] of predictions [...,
// classes] (logits, or probabilities as Keras takes them) and i32 ids [...].
Value class_id_values(bool from_logits, Value predictions, Value ids);

// A Loss of Keras's (what by_name, the loss classes and sample_weighted
// return): the mean as before, and what it is, so that a masked output can
// weigh its values (losses::masked; Loss::target<KerasLoss>() finds it).
struct KerasLoss {
  Loss mean;
  std::string kind;  // a name by_name knows
  CrossentropyOptions options = {};
  double delta = 1.0;
  bool packed = false;  // the targets carry sample weights (sample_weights.h)
  Value operator()(Value predictions, Value targets) const { return mean(predictions, targets); }
};

}  // namespace autoshard::losses
