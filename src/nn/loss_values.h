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

}  // namespace autoshard::losses
