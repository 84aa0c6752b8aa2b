#include "autoshard/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/io/crash_point.h"
#include "io/files.h"

namespace autoshard {

namespace fs = std::filesystem;

namespace {

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

// Writes a whole checkpoint directory next to `dir` and renames it into place.
void write_directory(const Model::Snapshot& snap, const std::string& dir, nlohmann::json state) {
  const fs::path target(dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
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
  std::ifstream in(root / "state.json");
  std::stringstream text;
  text << in.rdbuf();
  return parse_state(text.str(), (root / "state.json").string());
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
      for (const auto& entry : fs::directory_iterator(o_.directory)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind(".tmp-", 0) == 0 || name.rfind(".old-", 0) == 0) {
          std::error_code ec;
          fs::remove_all(entry.path(), ec);
        }
      }
  });
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
    if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / "state.json")) continue;
    try {
      out.push_back(std::stoll(name.substr(5)));
    } catch (const std::exception&) {
    }
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
    write_directory(snap, path_of(step), std::move(state));
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

void CheckpointManager::prune() {
  if (o_.keep <= 0) return;
  std::vector<int64_t> all = steps();
  if (static_cast<int>(all.size()) <= o_.keep) return;
  std::vector<int64_t> keep;
  if (o_.monitor.empty()) {
    keep.assign(all.end() - o_.keep, all.end());
  } else {
    // The best `keep` by the monitored metric, and always the latest (to resume from).
    std::vector<std::pair<double, int64_t>> scored;
    for (int64_t s : all) {
      nlohmann::json st;
      std::ifstream(fs::path(path_of(s)) / "state.json") >> st;
      double v = st["metrics"].value(o_.monitor, o_.mode == "min" ? INFINITY : -INFINITY);
      scored.emplace_back(o_.mode == "min" ? v : -v, -s);
    }
    std::sort(scored.begin(), scored.end());
    for (int i = 0; i < o_.keep; ++i) keep.push_back(-scored[i].second);
    keep.push_back(all.back());
  }
  for (int64_t s : all)
    if (std::find(keep.begin(), keep.end(), s) == keep.end()) fs::remove_all(path_of(s));
}

nlohmann::json CheckpointManager::restore(Model& model, std::optional<int64_t> step) {
  wait_until_finished();
  if (!step) step = latest_step();
  AS_CHECK(step.has_value(), "no checkpoint to restore in '", o_.directory, "'");
  return load_checkpoint(model, path_of(*step), /*with_optimizer=*/true);
}

void ModelCheckpoint::on_train_batch_end(int64_t, const Logs& logs) {
  manager_.maybe_save(model_, model_.iterations(), nlohmann::json::object(), logs);
}

}  // namespace autoshard
