#include "autoshard/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <sstream>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/input_file.h"
#include "autoshard/io/crash_point.h"
#include "io/files.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

// A state.json is a few kilobytes; anything near this is not one.
constexpr uint64_t kMaxStateBytes = uint64_t{64} << 20;

bool is_slot(const std::string& path) {
  return path.rfind("optimizer.", 0) == 0;
}

// Under mpirun every rank writes its own blocks into the same files: names of
// temporaries must agree across ranks, one rank (the leader) creates, renames
// and prunes, and the ranks meet at barriers between those steps.
bool distributed() {
  return World::process().distributed();
}
bool leader() {
  return World::process().leader();
}
void meet() {
  World::process().barrier();
}

// A name suffix unique to this save. Under mpirun every rank writes into the
// same temporaries, so the leader picks the suffix and every rank receives
// it: a collective, called by all ranks at the same points.
std::string shared_suffix() {
  static std::atomic<int> counter{0};
  return World::process().broadcast(std::to_string(::getpid()) + "-" + std::to_string(counter++));
}

// A suffix for a name only this process uses (the leader's ".old-" directory).
std::string local_suffix() {
  static std::atomic<int> counter{0};
  return std::to_string(::getpid()) + "-old-" + std::to_string(counter++);
}

// The files a checkpoint directory holds, and the temporaries of a save in
// progress ("model.safetensors.tmp.<pid>-<n>").
bool is_checkpoint_file(const std::string& name) {
  static const std::regex pattern(
      R"((model|optimizer)\.safetensors(\.tmp\.[0-9]+-[0-9]+)?|state\.json)");
  return std::regex_match(name, pattern);
}

// True when `dir` holds nothing but regular files a checkpoint save writes:
// what may be removed without taking anything of the user's with it.
bool holds_only_checkpoint_files(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(fs::symlink_status(dir, ec))) return false;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!fs::is_regular_file(entry.symlink_status(ec))) return false;
    if (!is_checkpoint_file(entry.path().filename().string())) return false;
  }
  return !ec;
}

// The state of `dir` when it is provably a complete checkpoint this tool
// wrote (only its files, a state.json of this format, its weights);
// nullopt otherwise, never an error.
std::optional<nlohmann::json> checkpoint_state_if_ours(const fs::path& dir) {
  if (!holds_only_checkpoint_files(dir) || !fs::exists(dir / "model.safetensors")) return {};
  try {
    return read_state(dir.string());
  } catch (const Error&) {
    return std::nullopt;
  }
}

// The run id a checkpoint state records ("" when none: an older checkpoint).
std::string run_of(const nlohmann::json& state) {
  return state.contains("run") && state["run"].is_string() ? state["run"].get<std::string>() : "";
}

// A leftover of a save that was interrupted: a temporary or replaced step
// directory of the names write_directory gives them, whose writer (the pid
// in its name) is no longer running on this machine, holding only
// checkpoint files. Anything else is the user's, or another live run's.
bool is_stale_leftover(const fs::path& entry) {
  static const std::regex pattern(
      R"(\.(tmp-step-[0-9]{8,}-([0-9]+)-[0-9]+|old-step-[0-9]{8,}-([0-9]+)-old-[0-9]+))");
  std::smatch m;
  const std::string name = entry.filename().string();
  if (!std::regex_match(name, m, pattern)) return false;
  const long pid = std::stol(m[2].matched ? m[2].str() : m[3].str());
  const bool alive =
      pid > 0 && pid < INT32_MAX && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
  return !alive && holds_only_checkpoint_files(entry);
}

// A run id: random, the same on every rank (the leader draws it).
std::string fresh_run_id() {
  std::random_device device;
  const uint64_t bits =
      (uint64_t{device()} << 32 | device()) ^
      static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
      static_cast<uint64_t>(::getpid());
  char id[17];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(bits));
  return World::process().broadcast(id);
}

// Writes a whole checkpoint directory next to `dir` and renames it into
// place. An existing `dir` is replaced only when it is a complete checkpoint
// of this tool and, when `run` is not empty, of that run: never a directory
// of the user's or another run's checkpoint.
void write_directory(const Model::Snapshot& snap, const std::string& dir, nlohmann::json state,
                     const std::string& run = "") {
  const fs::path target(dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (leader() && fs::exists(fs::symlink_status(target))) {
    const std::optional<nlohmann::json> existing = checkpoint_state_if_ours(target);
    AS_CHECK(existing && (run.empty() || run_of(*existing) == run), "'", dir,
             "' already exists and is not ",
             run.empty() ? "an autoshard checkpoint" : "a checkpoint of this run",
             "; it was left as it is (move it away, or save to another directory)");
  }
  fs::create_directories(parent);
  const fs::path tmp = parent / (".tmp-" + target.filename().string() + "-" + shared_suffix());
  if (leader()) fs::create_directories(tmp);
  meet();
  try {
    write_snapshot(snap, (tmp / "model.safetensors").string(), false);
    crash_point("checkpoint.write");
    write_snapshot(snap, (tmp / "optimizer.safetensors").string(), true);
    state["format"] = kCheckpointFormat;
    if (!leader()) return;
    write_text((tmp / "state.json").string(), state.dump(2) + "\n");
    fsync_path(tmp.string(), true);
    crash_point("checkpoint.rename");
    if (fs::exists(target)) {
      const fs::path old = parent / (".old-" + target.filename().string() + "-" + local_suffix());
      fs::rename(target, old);
      fs::rename(tmp, target);
      fs::remove_all(old);
    } else {
      fs::rename(tmp, target);
    }
    fsync_path(parent.string(), true);
    crash_point("checkpoint.done");
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace

void write_mapped(const Model::Snapshot& snap, const std::string& file,
                  const std::vector<FileTensor>& tensors,
                  const std::map<std::string, TensorMapping>& where,
                  const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::map<std::string, uint64_t> offset_of;
  std::map<std::string, std::string> dtype_of;
  uint64_t offset = 0;
  for (const FileTensor& t : tensors) {
    const uint64_t bytes = static_cast<uint64_t>(numel(t.shape)) * safetensors_dtype_size(t.dtype);
    header[t.name] = {
        {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset_of[t.name] = offset;
    dtype_of[t.name] = t.dtype;
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  const std::string tmp = file + ".tmp." + shared_suffix();
  const uint64_t data_start = 8 + text.size();
  if (leader()) {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    AS_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(uint64_t(text.size()) >> (8 * i));
    const bool ok =
        ::pwrite(fd, len, 8, 0) == 8 &&
        ::pwrite(fd, text.data(), text.size(), 8) == static_cast<ssize_t>(text.size()) &&
        ::ftruncate(fd, static_cast<off_t>(data_start + offset)) == 0;
    ::close(fd);
    if (!ok) ::unlink(tmp.c_str());
    AS_CHECK(ok, "writing '", file, "' failed: ", std::strerror(errno));
  }
  meet();  // the file exists with its header; every rank writes its blocks
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  AS_CHECK(fd >= 0, "cannot open '", tmp, "': ", std::strerror(errno));
  try {
    for (const auto& [path, m] : where) {
      const Model::Snapshot::Entry& e = snap.entries.at(path);
      const uint64_t at = data_start + offset_of.at(m.tensor);
      for (int d = 0; d < static_cast<int>(e.blocks.size()); ++d)
        if (e.blocks[d].raw() != nullptr)
          write_block(fd, at, m, e.shape, e.layout, snap.mesh, d, e.blocks[d],
                      dtype_of.at(m.tensor));
    }
    AS_CHECK(::fsync(fd) == 0, "writing '", file, "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  meet();  // every block is on disk
  if (leader())
    AS_CHECK(::rename(tmp.c_str(), file.c_str()) == 0, "cannot move '", tmp, "' to '", file, "'");
}

void write_snapshot(const Model::Snapshot& snap, const std::string& file, bool slots) {
  std::vector<FileTensor> tensors;
  std::map<std::string, TensorMapping> where;
  for (const auto& [path, e] : snap.entries) {
    if (is_slot(path) != slots) continue;
    tensors.push_back({path, e.shape});
    where[path] = TensorMapping::plain(path);
  }
  write_mapped(snap, file, tensors, where);
}

std::map<std::string, WeightSource> plain_sources(const std::string& file) {
  auto f = std::make_shared<const SafetensorsFile>(file);
  std::map<std::string, WeightSource> sources;
  for (const SafetensorsEntry& e : f->entries())
    sources[e.name] = mapped_source(f, TensorMapping::plain(e.name));
  return sources;
}

void save_checkpoint(Model& model, const std::string& dir, nlohmann::json state) {
  if (!state.contains("step")) state["step"] = model.iterations();
  filesystem_step(cat("saving checkpoint '", dir, "' failed"),
                  [&] { write_directory(model.snapshot(true), dir, std::move(state)); });
}

nlohmann::json read_state(const std::string& dir) {
  const fs::path root(dir);
  AS_CHECK(fs::is_directory(root), "checkpoint '", dir, "' does not exist");
  AS_CHECK(fs::exists(root / "state.json"), "checkpoint '", dir, "' is incomplete: no state.json");
  const std::string path = (root / "state.json").string();
  return parse_state(read_input_file(path, "checkpoint state", kMaxStateBytes), path);
}

nlohmann::json load_checkpoint(Model& model, const std::string& dir, bool with_optimizer) {
  const fs::path root(dir);
  nlohmann::json state = read_state(dir);
  AS_CHECK(!with_optimizer || fs::exists(root / "optimizer.safetensors"), "checkpoint '", dir,
           "' has no optimizer.safetensors: resuming would restart the optimizer from zero "
           "(load its weights with --weights to start training afresh from them)");
  std::map<std::string, WeightSource> sources =
      plain_sources((root / "model.safetensors").string());
  if (with_optimizer)
    for (auto& [k, v] : plain_sources((root / "optimizer.safetensors").string())) sources[k] = v;
  model.load_weights(sources);
  model.set_iterations(state["step"].get<int64_t>());
  return state;
}

// ---- CheckpointManager ----

CheckpointManager::CheckpointManager(CheckpointOptions o) : o_(std::move(o)) {
  AS_CHECK(!o_.directory.empty(), "CheckpointManager needs a directory");
  // Ranks save together, and MPI is called from the training thread only.
  if (distributed()) o_.background = false;
  AS_CHECK(o_.mode == "min" || o_.mode == "max", "checkpoint mode must be 'min' or 'max', got '",
           o_.mode, "'");
  filesystem_step(cat("cannot use checkpoint directory '", o_.directory, "'"), [&] {
    fs::create_directories(o_.directory);
    // Leftovers of saves that were interrupted: never complete, safe to drop.
    if (leader())
      for (const auto& entry : fs::directory_iterator(o_.directory))
        if (is_stale_leftover(entry.path())) {
          std::error_code ec;
          fs::remove_all(entry.path(), ec);
        }
  });
  run_ = fresh_run_id();
}

CheckpointManager::~CheckpointManager() {
  if (worker_.joinable()) worker_.join();
}

std::string CheckpointManager::path_of(int64_t step) const {
  char name[32];
  std::snprintf(name, sizeof name, "step-%08lld", static_cast<long long>(step));
  return (fs::path(o_.directory) / name).string();
}

std::vector<int64_t> CheckpointManager::steps() const {
  std::vector<int64_t> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(o_.directory, ec)) {
    const std::string name = entry.path().filename().string();
    // Exactly the names path_of gives ("step-00000012x" is not step 12).
    static const std::regex pattern("step-[0-9]{8,18}");
    if (!std::regex_match(name, pattern) || !fs::exists(entry.path() / "state.json")) continue;
    const int64_t step = std::stoll(name.substr(5));
    if (fs::path(path_of(step)).filename() == name) out.push_back(step);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<int64_t> CheckpointManager::latest_step() const {
  std::vector<int64_t> s = steps();
  if (s.empty()) return std::nullopt;
  return s.back();
}

bool CheckpointManager::maybe_save(Model& model, int64_t step, nlohmann::json state,
                                   const Logs& metrics) {
  if (o_.save_every <= 0 || step % o_.save_every != 0) return false;
  save(model, step, std::move(state), metrics);
  return true;
}

void CheckpointManager::save(Model& model, int64_t step, nlohmann::json state,
                             const Logs& metrics) {
  wait_until_finished();
  state["step"] = step;
  state["metrics"] = metrics;
  state["run"] = run_;
  Model::Snapshot snap = model.snapshot(true);  // taken now: training may go on
  if (!o_.background) {
    write(std::move(snap), step, std::move(state));
    wait_until_finished();
    return;
  }
  worker_ = std::thread([this, snap = std::move(snap), step, state = std::move(state)]() mutable {
    write(std::move(snap), step, std::move(state));
  });
}

void CheckpointManager::write(Model::Snapshot snap, int64_t step, nlohmann::json state) {
  try {
    write_directory(snap, path_of(step), std::move(state), run_);
    if (leader()) prune();
    meet();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = cat("saving checkpoint step ", step, " failed: ", e.what());
  }
}

void CheckpointManager::wait_until_finished() {
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.empty()) {
    std::string e = std::move(error_);
    error_.clear();
    throw Error(e);
  }
}

// Retention removes only what it can prove is this run's own complete
// checkpoint (its run id in a state.json of this format, nothing but
// checkpoint files in the directory), and never the run's newest: another
// run's checkpoints, older ones without a run id and the user's files stay.
void CheckpointManager::prune() {
  if (o_.keep <= 0) return;
  std::vector<int64_t> own;  // oldest first
  std::vector<std::pair<double, int64_t>> scored;
  for (int64_t s : steps()) {
    const std::optional<nlohmann::json> st = checkpoint_state_if_ours(path_of(s));
    if (!st || run_of(*st) != run_) continue;
    own.push_back(s);
    if (o_.monitor.empty()) continue;
    double v = o_.mode == "min" ? INFINITY : -INFINITY;  // a missing metric is the worst
    const nlohmann::json& metrics = st->contains("metrics") ? (*st)["metrics"] : nlohmann::json();
    if (metrics.is_object() && metrics.contains(o_.monitor) && metrics[o_.monitor].is_number())
      v = metrics[o_.monitor].get<double>();
    scored.emplace_back(o_.mode == "min" ? v : -v, -s);
  }
  if (static_cast<int>(own.size()) <= o_.keep) return;
  std::vector<int64_t> keep;
  if (o_.monitor.empty()) {
    keep.assign(own.end() - o_.keep, own.end());
  } else {
    // The best `keep` by the monitored metric, and always the latest (to resume from).
    std::sort(scored.begin(), scored.end());
    for (int i = 0; i < o_.keep; ++i) keep.push_back(-scored[i].second);
    keep.push_back(own.back());
  }
  for (int64_t s : own)
    if (std::find(keep.begin(), keep.end(), s) == keep.end()) fs::remove_all(path_of(s));
}

nlohmann::json CheckpointManager::restore(Model& model, std::optional<int64_t> step) {
  wait_until_finished();
  if (!step) step = latest_step();
  AS_CHECK(step.has_value(), "no checkpoint to restore in '", o_.directory, "'");
  nlohmann::json state = load_checkpoint(model, path_of(*step), /*with_optimizer=*/true);
  // Saves from here on continue that run: its older checkpoints are this
  // run's to prune. (One without a run id keeps this manager's fresh one.)
  if (!run_of(state).empty()) run_ = run_of(state);
  return state;
}

void ModelCheckpoint::on_train_batch_end(int64_t, const Logs& logs) {
  manager_.maybe_save(model_, model_.iterations(), nlohmann::json::object(), logs);
}

}  // namespace autoshard
