// Callbacks observe fit(): Keras's hooks, with the same names.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace autoshard {

using Logs = std::map<std::string, double>;

class Callback {
 public:
  virtual ~Callback() = default;
  virtual void on_train_begin() {}
  virtual void on_epoch_begin(int /*epoch*/, int64_t /*steps*/) {}
  virtual void on_train_batch_end(int64_t /*batch*/, const Logs& /*logs*/) {}
  virtual void on_epoch_end(int /*epoch*/, const Logs& /*logs*/) {}
  virtual void on_train_end() {}
};

// Keras's progress bar on stderr: "Epoch 1/3  12/40 [=====>....] - loss: 2.31".
class ProgressBar : public Callback {
 public:
  void on_epoch_begin(int epoch, int64_t steps) override;
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_epoch_end(int epoch, const Logs& logs) override;
  int epochs = 1;

 private:
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace autoshard
