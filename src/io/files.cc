#include "io/files.h"

#include <fcntl.h>
#include <unistd.h>

#include <fstream>

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
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
    AS_CHECK(out.good(), "cannot write '", path, "'");
  }
  fsync_path(path, false);
}

void write_directory_atomically(const std::string& dir,
                                const std::function<void(const fs::path&)>& fill) {
  const fs::path target(dir);
  const fs::path parent = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const fs::path tmp =
      parent / (".tmp-" + target.filename().string() + "-" + std::to_string(::getpid()));
  filesystem_step(cat("cannot create '", dir, "'"), [&] {
    fs::create_directories(parent);
    fs::remove_all(tmp);
    fs::create_directory(tmp);
  });
  try {
    fill(tmp);
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
  } catch (...) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw;
  }
}

}  // namespace autoshard
