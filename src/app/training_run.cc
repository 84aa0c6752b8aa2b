#include "autoshard/app/training_run.h"

#include <csignal>
#include <cstdio>
#include <filesystem>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"

namespace autoshard {

RunCheckpoints::RunCheckpoints(const RunCheckpointOptions& options, Model& model, StateAt state_at,
                               const std::vector<ResumeSetting>& must_match)
    : model_(model), state_at_(std::move(state_at)) {
  start_ = open(options, must_match);
  saved_ = manager_ ? manager_->latest_step().value_or(-1) : -1;
}

RunCheckpoints::~RunCheckpoints() = default;

int64_t RunCheckpoints::open(const RunCheckpointOptions& o,
                             const std::vector<ResumeSetting>& must_match) {
  if (o.directory.empty()) return 0;
  AS_CHECK(!std::filesystem::exists(o.directory) || std::filesystem::is_directory(o.directory),
           "--checkpoint-dir '", o.directory, "' is a file, not a directory");
  manager_ = std::make_unique<CheckpointManager>(
      CheckpointOptions{.directory = o.directory, .save_every = o.save_every, .keep = o.keep});
  const std::optional<int64_t> latest = manager_->latest_step();
  if (!o.resume) {
    AS_CHECK(!latest, "--checkpoint-dir '", o.directory,
             "' already holds checkpoints of an earlier run (up to step ", latest.value_or(0),
             "); continue that run with --resume, or give a new or empty directory");
    return 0;
  }
  AS_CHECK(latest, "--resume: no checkpoint in '", o.directory,
           "' to resume from (run without --resume to start from scratch)");
  const nlohmann::json saved = read_state(manager_->path_of(*latest));
  const nlohmann::json now = state_at_(0);
  for (const ResumeSetting& s : must_match)
    AS_CHECK(!saved.contains(s.key) || saved[s.key] == now[s.key], "--resume: the checkpoint in '",
             o.directory, "' was trained with ", s.name, " ", saved[s.key].dump(),
             ", this run has ", now[s.key].dump(),
             " (resume with the same value, or start a new run)");
  const nlohmann::json state = manager_->restore(model_);
  const int64_t start = state.value("data_position", state["step"].get<int64_t>());
  if (World::process().leader())
    std::fprintf(stderr, "resumed from %s at step %lld\n", manager_->path_of(*latest).c_str(),
                 static_cast<long long>(start));
  return start;
}

void RunCheckpoints::after_step(int64_t step, double loss) {
  if (manager_ && manager_->maybe_save(model_, step, state_at_(step), {{"loss", loss}}))
    saved_ = step;
}

void RunCheckpoints::finish(int64_t step) {
  if (!manager_) return;
  if (saved_ != step && step > 0) {
    manager_->save(model_, step, state_at_(step));
    saved_ = step;
  }
  manager_->wait_until_finished();
}

void RunCheckpoints::stop(int signal, int64_t step) {
  if (manager_ && saved_ != step) {
    manager_->save(model_, step, state_at_(step));
    saved_ = step;
  }
  if (manager_) manager_->wait_until_finished();
  throw Interrupted(signal, cat("stopped by signal ", signal, " after step ", step,
                                manager_ ? cat("; saved in ", manager_->path_of(step)) : ""));
}

// Set by the handler only; read after each step.
volatile std::sig_atomic_t run_stop_signal = 0;
extern "C" void on_run_stop_signal(int sig) {
  run_stop_signal = sig;
}

void stop_training_on_signals() {
  std::signal(SIGINT, on_run_stop_signal);
  std::signal(SIGTERM, on_run_stop_signal);
}

int training_stop_signal() {
  return static_cast<int>(World::process().max(run_stop_signal));
}

}  // namespace autoshard
