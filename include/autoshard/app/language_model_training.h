// Training a decoder language model the one way `autoshard train` and
// Python's LanguageModel.fit both do it: the optimizer and its defaults, and
// the loop over steps. Each caller keeps only what is its own (the CLI's
// printing, log, checkpoints and signals; Python's callback).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "autoshard/io/token_data.h"
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

// Which steps a run takes and on what batches.
struct LanguageModelSteps {
  int64_t first = 0;  // a resumed run starts past 0
  int64_t end = 0;    // steps [first, end) run
  int64_t batch = 0, seq = 0;
  // The rows of each batch this process reads (an MPI rank its own; -1: to
  // the last row).
  int64_t row_begin = 0, row_end = -1;
  // Starts the divergence error ("fit: ") and ends it with what to change
  // ("lower --lr, ...").
  std::string error_prefix;
  std::string divergence_advice = "lower the learning rate, clip harder, or check the data";
};

// What one step did, for the caller's printing, logging and saving.
struct LanguageModelStep {
  int64_t index = 0;  // 0-based; the step's number is index + 1
  double loss = 0;
  double seconds = 0;  // the step's wall time
};

// Runs the steps: batch `index` of `data` (targets: the inputs shifted by
// one token) through `train_on_batch`, stopping with an error naming the
// step when the loss is not finite, then `after_step`, which returns false
// to stop early (or throws). Returns the index after the last step run.
int64_t train_language_model_steps(
    const TokenData& data, const LanguageModelSteps& steps,
    const std::function<double(const Tensor& x, const Tensor& y)>& train_on_batch,
    const std::function<bool(const LanguageModelStep&)>& after_step);

}  // namespace autoshard
