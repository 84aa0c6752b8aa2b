#include "io/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <fstream>

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

void write_directory_atomically(const std::string& dir,
                                const std::function<void(const fs::path&)>& fill) {
  // Under mpirun every rank fills the same temporary (its name is the
  // leader's), and the leader alone creates and renames it.
  const World& world = World::process();
  static std::atomic<int> counter{0};
  const fs::path target(dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path tmp =
      parent / (".tmp-" + target.filename().string() + "-" +
                world.broadcast(std::to_string(::getpid()) + "-" + std::to_string(counter++)));
  if (world.leader())
    filesystem_step(cat("cannot create '", dir, "'"), [&] {
      fs::create_directories(parent);
      fs::remove_all(tmp);
      fs::create_directory(tmp);
    });
  world.barrier();
  try {
    fill(tmp);
    world.barrier();  // every rank's part is written
    if (world.leader())
      filesystem_step(cat("cannot move '", tmp.string(), "' to '", dir, "'"), [&] {
        if (fs::exists(target)) {
          const fs::path old =
              parent / (".old-" + target.filename().string() + "-" + std::to_string(::getpid()));
          fs::rename(target, old);
          fs::rename(tmp, target);
          fs::remove_all(old);
        } else {
          fs::rename(tmp, target);
        }
      });
    world.barrier();  // in place before any rank goes on
  } catch (...) {
    std::error_code ec;
    if (world.leader()) fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace autoshard
