// The options of `autoshard train`: a GPT on a token stream (train.cc), or a
// saved Keras model on NumPy arrays (keras_train.cc).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "cli/keras_command.h"
#include "cli/options.h"

namespace autoshard::cli {

// What only a Keras model's training takes.
struct KerasTrainOptions {
  std::string x, y, validation_x, validation_y;
  int epochs = 0;   // 0: not given (1, unless --steps is)
  int verbose = 1;  // fit's verbose: 0 quiet, 1 a bar, 2 a line an epoch
  std::string save;
  KerasOverrides overrides;
};

struct TrainOptions : CommonOptions {
  TrainOptions() {
    model = "tiny";
    batch = 16;
  }
  int64_t steps = 800;
  std::optional<double> lr;  // default: 6e-3 for the byte-level presets, 6e-4 (GPT-2's) otherwise
  std::string schedule = "cosine";
  int64_t warmup = -1;  // -1: 5% of the steps, at most 100
  double weight_decay = 0.1, clip = 1.0;
  double temperature = 0.6;
  std::string log;
  bool overwrite = false;  // --log may replace an existing file
  std::string checkpoint_dir;
  int64_t save_every = 0;
  int keep = 0;
  bool resume = false;
  int64_t sample = -1;  // bytes to generate at the end; -1: 300 for byte data
  std::string sampling = "random";
  std::string trace;            // --trace FILE.json: a timeline of the steps (runtime/timeline.h)
  std::string trace_steps;      // --trace-steps a:b (default: every step)
  int64_t microbatches = 0;     // --microbatches M of a pipe mesh (0: as many as stages)
  int64_t microbatch_size = 0;  // or --microbatch-size b sequences per data replica
  std::string pipe_schedule = "1f1b";
  int virtual_stages = 1;  // --virtual-stages v (interleaved)
  KerasTrainOptions keras;
};

// Adds the Keras flags to `train`: --x, --y, --validation-x, --validation-y,
// --epochs, --verbose, --save, --loss, --optimizer.
void add_keras_train_options(CLI::App* cmd, TrainOptions& o);
// True when the options ask to train a saved Keras model.
bool is_keras_training(const TrainOptions& o);
// Trains a saved Keras model; `cmd` tells which flags were given (the
// file's compile config holds what was not).
void run_keras_train(TrainOptions& o, const CLI::App& cmd);

}  // namespace autoshard::cli
