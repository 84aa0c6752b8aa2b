#include "autoshard/nn/callbacks.h"

#include <cstdio>

namespace autoshard {

void ProgressBar::on_epoch_begin(int epoch, int64_t steps) {
  steps_ = steps;
  start_ = std::chrono::steady_clock::now();
  std::fprintf(stderr, "Epoch %d/%d\n", epoch + 1, epochs);
}

void ProgressBar::on_train_batch_end(int64_t batch, const Logs& logs) {
  constexpr int kWidth = 30;
  int filled = steps_ ? static_cast<int>((batch + 1) * kWidth / steps_) : kWidth;
  std::string bar(kWidth, '.');
  for (int i = 0; i < filled; ++i) bar[i] = '=';
  if (filled < kWidth) bar[filled] = '>';
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  auto it = logs.find("loss");
  std::fprintf(stderr, "\r%lld/%lld [%s] - %.1fs - loss: %.4f", static_cast<long long>(batch + 1),
               static_cast<long long>(steps_), bar.c_str(), secs,
               it == logs.end() ? 0.0 : it->second);
}

void ProgressBar::on_epoch_end(int, const Logs&) {
  std::fprintf(stderr, "\n");
}

}  // namespace autoshard
