// A training run's JSON-lines log (`autoshard train --log`, the Keras
// train's too): one object per step, read back for `autoshard report`.
//
//   {"step": 12, "loss": 3.1, "lr": 0.0003, "step_ms": 41.2,
//    "tokens_per_second": 3100, ...}      (train: language models)
//   {"step": 12, "epoch": 1, "loss": 0.7, "lr": 0.001,
//    "examples_per_second": 900, "val_loss": 0.8, ...}   (Keras models)
//
// "step" is required; the other fields are read where a line has them.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace autoshard::cli {

struct TrainingLog {
  std::string path;
  // Per field ("loss", "val_loss", "lr", "tokens_per_second",
  // "examples_per_second", "step_ms"): (step, value), one per step that
  // logged it, by step. A step logged twice (a resumed run repeats the
  // steps after its last checkpoint) keeps its later line.
  std::map<std::string, std::vector<std::pair<double, double>>> series;
  size_t steps = 0;  // distinct steps logged
};

// The fields drawn, in the order read.
const std::vector<std::string>& training_log_fields();

// Reads `path` (a regular file of at most 1 GiB). Throws autoshard::Error
// naming the file and line for a line that is not a JSON object, that has
// no numeric "step", or whose field of training_log_fields() is not a
// number; and for a log without any step.
TrainingLog read_training_log(const std::string& path);

}  // namespace autoshard::cli
