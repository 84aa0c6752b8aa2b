// Training a decoder language model the one way `autoshard train` and
// Python's LanguageModel.fit both do it: the optimizer and its defaults.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "autoshard/optim/optimizers.h"

namespace autoshard {

// The optimizer's settings (train's --lr, --lr-schedule, --warmup,
// --weight-decay, --clip; fit's keywords).
struct LanguageModelOptimizerOptions {
  // Default: 6e-3 for a byte vocabulary (256 tokens), else 6e-4.
  std::optional<double> learning_rate;
  // "cosine": warmup, then a cosine decay to a tenth; else constant.
  std::string schedule = "cosine";
  // Warmup steps; -1: min(100, steps / 20).
  int64_t warmup = -1;
  double weight_decay = 0.1;
  double clipnorm = 1.0;
};

// AdamW (beta_2 0.95) for a run of `steps` steps on a vocabulary of
// `vocab_size` tokens.
std::shared_ptr<Optimizer> language_model_optimizer(const LanguageModelOptimizerOptions& options,
                                                    int64_t steps, int64_t vocab_size);

}  // namespace autoshard
