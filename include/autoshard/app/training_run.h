// What every training command does around its steps, whatever it trains:
// checkpoints every few steps, one run per checkpoint directory, resuming
// only with the settings the run was trained with, and stopping cleanly on
// SIGINT or SIGTERM (the step finishes, the run saves, every rank stops at
// the same step). `autoshard train` uses it for language models and Keras
// files alike.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "autoshard/io/checkpoint.h"

namespace autoshard {

// A run stopped by SIGINT or SIGTERM after saving what it had: the command
// line reports it and exits with 128 + the signal, as shells do.
struct Interrupted {
  int signal;
  std::string message;
  Interrupted(int s, std::string m) : signal(s), message(std::move(m)) {}
};

// --checkpoint-dir, --save-every, --keep, --resume.
struct RunCheckpointOptions {
  std::string directory;  // empty: no checkpoints
  int64_t save_every = 0;
  int keep = 0;
  bool resume = false;
};

// A setting a resumed run must share with its checkpoint: its key in the
// run's state and the name the user gives it (a flag, "--batch").
struct ResumeSetting {
  std::string key;
  std::string name;
};

// The checkpoints of one run. Every call is a no-op without a directory.
class RunCheckpoints {
 public:
  // What a checkpoint after `step` steps records of the run (its
  // "data_position" is where a resumed run continues).
  using StateAt = std::function<nlohmann::json(int64_t step)>;

  // Opens the directory. A directory holding an earlier run's checkpoints is
  // refused unless resuming (a new run there would mix its steps with the
  // earlier run's); resuming checks each of `must_match` against the latest
  // checkpoint, then restores it into `model`.
  RunCheckpoints(const RunCheckpointOptions& options, Model& model, StateAt state_at,
                 const std::vector<ResumeSetting>& must_match);
  ~RunCheckpoints();

  // The step the run starts at: 0, or where the restored run stopped.
  int64_t start() const { return start_; }
  // After `step` steps: saves when --save-every says so.
  void after_step(int64_t step, double loss);
  // At the end of the run: the last step is always saved.
  void finish(int64_t step);
  // `signal` arrived during step `step`: saves it and throws Interrupted
  // naming where.
  [[noreturn]] void stop(int signal, int64_t step);

 private:
  int64_t open(const RunCheckpointOptions& options, const std::vector<ResumeSetting>& must_match);

  Model& model_;
  StateAt state_at_;
  std::unique_ptr<CheckpointManager> manager_;
  int64_t start_ = 0;
  int64_t saved_ = -1;  // the last step saved
};

// From now on SIGINT and SIGTERM only mark the run to stop after its step.
void stop_training_on_signals();
// The signal any rank of the run received since (0: none). Every rank asks
// after each step, so all of them stop at the same step.
int training_stop_signal();

}  // namespace autoshard
