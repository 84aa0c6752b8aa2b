#include "autoshard/app/training.h"

#include <algorithm>

namespace autoshard {

std::shared_ptr<Optimizer> language_model_optimizer(const LanguageModelOptimizerOptions& options,
                                                    int64_t steps, int64_t vocab_size) {
  const double lr = options.learning_rate.value_or(vocab_size == 256 ? 6e-3 : 6e-4);
  auto optimizer = AdamW({.learning_rate = lr,
                          .beta_2 = 0.95,
                          .weight_decay = options.weight_decay,
                          .clipnorm = options.clipnorm});
  if (options.schedule == "cosine") {
    const int64_t warmup =
        options.warmup >= 0 ? options.warmup : std::min<int64_t>(100, steps / 20);
    optimizer->schedule = cosine_decay(lr, std::max<int64_t>(1, steps - warmup), 0.1, warmup);
  }
  return optimizer;
}

}  // namespace autoshard
