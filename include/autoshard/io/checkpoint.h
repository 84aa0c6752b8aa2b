// Checkpoints: a model's weights and optimizer state written as standard
// safetensors files straight from the devices' blocks (no whole tensor is
// gathered), beside a JSON of the training state; loadable on any mesh, since
// each device reads only its own byte runs of each tensor.
//
// A checkpoint is a directory:
//   model.safetensors      weights, by autoshard path
//   optimizer.safetensors  optimizer slots ("optimizer.m.<path>", ...)
//   state.json             {"format", "step", "data_position", "mesh", "plan",
//                           "config", "metrics", "run", "user"}
// Saves are atomic: everything is written to a temporary directory that is
// renamed into place only when complete.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "autoshard/io/tensor_mapping.h"
#include "autoshard/nn/callbacks.h"
#include "autoshard/nn/model.h"

namespace autoshard {

// The "format" every checkpoint's state.json carries.
inline constexpr const char* kCheckpointFormat = "autoshard-checkpoint-1";

// A tensor of a file being written, and where each snapshot entry goes in it.
struct FileTensor {
  std::string name;
  Shape shape;
  std::string dtype = "F32";  // or F16, BF16 (rounded to nearest even)
};
// Writes tensors to one safetensors file from a snapshot's blocks (each
// device's byte runs, no whole tensor gathered), atomically (temporary file,
// then rename). Parts of a file tensor no entry maps to are zeros.
void write_mapped(const Model::Snapshot& snap, const std::string& file,
                  const std::vector<FileTensor>& tensors,
                  const std::map<std::string, TensorMapping>& where,
                  const std::map<std::string, std::string>& metadata = {});
// The weights (slots = false) or the optimizer slots (true) of a snapshot,
// each as a tensor of its own name.
void write_snapshot(const Model::Snapshot& snap, const std::string& file, bool slots);

// Weight sources for every tensor of a safetensors file, by its own name.
std::map<std::string, WeightSource> plain_sources(const std::string& file);

// Saves synchronously into `dir` (created atomically; an existing autoshard
// checkpoint is replaced, anything else there is an error). `state` is stored as state.json with
// "format" added.
void save_checkpoint(Model& model, const std::string& dir, nlohmann::json state);
// Loads the weights (and, with `with_optimizer`, the optimizer state, which
// must then be there) into `model` (any mesh) and returns the state.json,
// after checking the checkpoint is complete and of this format.
nlohmann::json load_checkpoint(Model& model, const std::string& dir, bool with_optimizer = true);
// The state.json of a checkpoint directory, checked: an object of this
// format with a whole "step" (and whole "data_position", "batch", "seq" when
// present). parse_state does the same for a text (`source` names it).
nlohmann::json read_state(const std::string& dir);
nlohmann::json parse_state(const std::string& text, const std::string& source);

struct CheckpointOptions {
  std::string directory = "";
  int64_t save_every = 0;    // steps between saves (0: only explicit saves)
  int keep = 0;              // checkpoints kept (0: all)
  std::string monitor = "";  // keep the best by this metric instead of the latest
  std::string mode = "min";  // "min" or "max" for `monitor`
  bool background = true;    // write while training goes on
};

// Keras ModelCheckpoint / Orbax CheckpointManager semantics: periodic saves,
// retention of the last (or best) K, background writing with a wait.
//
// Each manager writes for one run, named by a random id in every state.json
// it saves ("run"); restore() continues the run it loads. Retention removes
// only complete checkpoints of its own run, never the run's newest, so a
// directory holding another run's checkpoints, or files of the user's,
// loses nothing; a step directory that is not this run's is never replaced.
// Leftovers of interrupted saves are removed at start-up only when their
// names are a save's temporaries, their writer is not running and they hold
// nothing but checkpoint files.
class CheckpointManager {
 public:
  explicit CheckpointManager(CheckpointOptions options);
  ~CheckpointManager();
  CheckpointManager(const CheckpointManager&) = delete;
  CheckpointManager& operator=(const CheckpointManager&) = delete;

  // Saves when `step` is a multiple of save_every; true if it did.
  bool maybe_save(Model& model, int64_t step, nlohmann::json state, const Logs& metrics = {});
  // Saves now (in the background if configured; the snapshot is taken now).
  void save(Model& model, int64_t step, nlohmann::json state, const Logs& metrics = {});
  // Blocks until the background save in flight (if any) is on disk; rethrows its error.
  void wait_until_finished();

  std::vector<int64_t> steps() const;  // complete checkpoints, oldest first
  std::optional<int64_t> latest_step() const;
  std::string path_of(int64_t step) const;
  // The run this manager saves for (see above).
  const std::string& run_id() const { return run_; }
  // Loads checkpoint `step` (default: the latest) and returns its state.
  nlohmann::json restore(Model& model, std::optional<int64_t> step = std::nullopt);

 private:
  void write(Model::Snapshot snap, int64_t step, nlohmann::json state);
  void prune();

  CheckpointOptions o_;
  std::string run_;
  std::thread worker_;
  std::mutex mu_;
  std::string error_;
};

// A Keras-style callback that saves through a manager after every batch
// whose step is a multiple of save_every.
class ModelCheckpoint : public Callback {
 public:
  ModelCheckpoint(Model& model, CheckpointManager& manager) : model_(model), manager_(manager) {}
  void on_train_batch_end(int64_t batch, const Logs& logs) override;
  void on_train_end() override { manager_.wait_until_finished(); }

 private:
  Model& model_;
  CheckpointManager& manager_;
};

}  // namespace autoshard
