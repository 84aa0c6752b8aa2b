#include "autoshard/app/language_model_training.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "autoshard/error.h"

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

int64_t train_language_model_steps(
    const TokenData& data, const LanguageModelSteps& steps,
    const std::function<double(const Tensor& x, const Tensor& y)>& train_on_batch,
    const std::function<bool(const LanguageModelStep&)>& after_step) {
  Tensor x, y;
  int64_t index = steps.first;
  while (index < steps.end) {
    data.batch(index, steps.batch, steps.seq, x, y, steps.row_begin, steps.row_end);
    const auto start = std::chrono::steady_clock::now();
    const double loss = train_on_batch(x, y);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    AS_CHECK(std::isfinite(loss), steps.error_prefix, "training diverged: the loss is ",
             std::isnan(loss) ? "nan" : "infinite", " at step ", index + 1, " (",
             steps.divergence_advice, ")");
    const bool go_on = after_step({index, loss, seconds});
    ++index;
    if (!go_on) break;
  }
  return index;
}

}  // namespace autoshard
