// Keras 3's progress display of fit and evaluate, on stderr:
//
//   Epoch 1/3
//   12/40 ━━━━━━───────────── 3s 95ms/step - accuracy: 0.5312 - loss: 1.2051
//
// verbose 1 redraws the bar after each step on a terminal (the time is the
// ETA while the epoch runs, its duration at the end) and prints it once an
// epoch elsewhere; verbose 2 prints one line an epoch without the bar; 0
// prints nothing. Logs are the running means of the epoch, in name order
// (Keras's accuracy, loss, val_accuracy, val_loss).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace autoshard::cli {

class KerasProgress {
 public:
  // `enabled`: this process prints (under mpirun, rank 0 only).
  KerasProgress(int verbose, bool enabled, int epochs);
  void epoch_begin(int epoch, int64_t steps);
  // After step `done` (1-based) of the epoch.
  void step_end(int64_t done, const std::map<std::string, double>& logs);
  void epoch_end(const std::map<std::string, double>& logs);
  // evaluate's one line: the whole pass as one "epoch" without a header.
  void show_only(int64_t steps, const std::map<std::string, double>& logs);

 private:
  std::string line(int64_t done, bool final, const std::map<std::string, double>& logs) const;

  int verbose_;
  bool enabled_, tty_;
  int epochs_;
  int64_t steps_ = 0, done_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// " - accuracy: 0.9375 - loss: 0.2100": logs as Keras prints them.
std::string format_logs(const std::map<std::string, double>& logs);

}  // namespace autoshard::cli
