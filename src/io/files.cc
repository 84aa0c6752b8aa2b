#include "io/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <vector>

#include "autoshard/comm/world.h"

namespace autoshard {

namespace fs = std::filesystem;

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

void write_text(const std::string& path, const std::string& text) {
  if (!World::process().leader()) return;  // ranks write into shared directories
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    AS_CHECK(out.good(), "cannot write '", path, "'");
  }
  fsync_path(path, false);
}

namespace {

// Refuses a save into `target` that would replace a file or a user's
// directory (see DirectorySave); true when `target` is an existing directory.
bool check_directory_target(const fs::path& target, const DirectorySave& how) {
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (!fs::exists(st)) {
    // A dangling symbolic link would be replaced by the rename: refuse it.
    AS_CHECK(!fs::is_symlink(fs::symlink_status(target, ec)), "'", target.string(),
             "' is a symbolic link to nothing; give a directory");
    return false;
  }
  AS_CHECK(fs::is_directory(st), "'", target.string(), "' is a file; give a directory");
  const bool empty = fs::is_empty(target, ec);
  AS_CHECK(!ec, "cannot read directory '", target.string(), "': ", ec.message());
  AS_CHECK(empty || how.overwrite, "'", target.string(),
           "' exists and is not empty; save into a new or empty directory, or save with "
           "overwrite (which replaces only the files the save writes)");
  return true;
}

// The paths under `root` (relative), directories before what they hold.
std::vector<fs::path> entries_under(const fs::path& root) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(root))
    out.push_back(fs::relative(e.path(), root));
  return out;
}

// Moves what `tmp` holds into the existing directory `target`, file by file,
// after checking that no move would replace a directory, go through a
// symbolic link or leave a stale file of the format that readers would take
// instead. What `target` held besides is kept.
void move_into(const fs::path& tmp, const fs::path& target, const DirectorySave& how) {
  const std::vector<fs::path> written = entries_under(tmp);
  std::error_code ec;
  for (const fs::path& rel : written) {
    const fs::file_status at = fs::symlink_status(target / rel, ec);
    if (!fs::exists(at)) continue;
    if (fs::is_directory(fs::symlink_status(tmp / rel, ec)))
      AS_CHECK(fs::is_directory(at), "'", (target / rel).string(),
               "' is in the way of a directory this save writes; move it away");
    else
      AS_CHECK(!fs::is_directory(at), "'", (target / rel).string(),
               "' is a directory where this save writes a file; move it away");
  }
  for (const std::string& name : how.read_names)
    AS_CHECK(fs::exists(fs::symlink_status(tmp / name, ec)) ||
                 !fs::exists(fs::symlink_status(target / name, ec)),
             "'", (target / name).string(),
             "' is left from an earlier save; this one does not write it and readers would take "
             "it instead of what is saved: remove it, or save into a new directory");
  for (const fs::path& rel : written) {
    const fs::path from = tmp / rel, to = target / rel;
    if (fs::is_directory(fs::symlink_status(from, ec))) {
      if (!fs::exists(fs::symlink_status(to, ec))) fs::create_directory(to);
      continue;
    }
    fs::rename(from, to);  // one file replaced at a time, whole
  }
  fsync_path(target.string(), true);
}

}  // namespace

void write_directory_atomically(const std::string& dir,
                                const std::function<void(const fs::path&)>& fill,
                                const DirectorySave& how) {
  // Under mpirun every rank fills the same temporary (its name is the
  // leader's), and the leader alone creates and moves it. Every rank checks
  // the target (the ranks share it), so a refusal leaves none waiting.
  const World& world = World::process();
  static std::atomic<int> counter{0};
  AS_CHECK(!dir.empty(), "a directory to save into is needed");
  fs::path target(dir);
  const bool exists = check_directory_target(target, how);
  // Beside the directory itself (a symbolic link's target), on its file system.
  if (exists)
    target = filesystem_step(cat("cannot read '", dir, "'"), [&] { return fs::canonical(target); });
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path tmp =
      parent / (".tmp-" + target.filename().string() + "-" +
                world.broadcast(std::to_string(::getpid()) + "-" + std::to_string(counter++)));
  if (world.leader())
    filesystem_step(cat("cannot create '", dir, "'"), [&] {
      fs::create_directories(parent);
      fs::create_directory(tmp);  // a new name: nothing of anyone's is removed
    });
  world.barrier();
  try {
    fill(tmp);
    world.barrier();  // every rank's part is written
    if (world.leader())
      filesystem_step(cat("cannot move '", tmp.string(), "' to '", dir, "'"), [&] {
        if (!exists) {
          fs::rename(tmp, target);
        } else {
          move_into(tmp, target, how);
          fs::remove_all(tmp);  // the temporary this save made, emptied of files
        }
      });
    world.barrier();  // in place before any rank goes on
  } catch (...) {
    std::error_code ec;
    if (world.leader()) fs::remove_all(tmp, ec);  // ours alone
    throw;
  }
}

}  // namespace autoshard
