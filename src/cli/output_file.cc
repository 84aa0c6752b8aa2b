#include "cli/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "autoshard/error.h"

namespace autoshard::cli {

namespace fs = std::filesystem;

namespace {

std::string parent_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

// A temporary beside `path` that no other writer uses.
std::string temporary_beside(const std::string& path) {
  static std::atomic<int> counter{0};
  const fs::path p(path);
  return (fs::path(parent_of(path)) /
          ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter++)))
      .string();
}

// Writes all of `text` to the new file `tmp` and flushes it to disk.
void write_new_file(const std::string& tmp, const std::string& path, const std::string& flag,
                    const std::string& text) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  AS_CHECK(fd >= 0, flag, " '", path, "' cannot be written: ", std::strerror(errno));
  const char* at = text.data();
  size_t left = text.size();
  bool ok = true;
  while (ok && left > 0) {
    const ssize_t n = ::write(fd, at, left);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) at += n, left -= static_cast<size_t>(n);
  }
  const int error = errno;
  ok = ok && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) ::unlink(tmp.c_str());
  AS_CHECK(ok, flag, " '", path, "': writing failed: ", std::strerror(error));
}

// Moves `tmp` to `path` without replacing a file that appeared meanwhile.
bool move_without_replacing(const std::string& tmp, const std::string& path) {
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0)
    return true;
  if (errno != EINVAL && errno != ENOSYS) return false;
  // A file system without RENAME_NOREPLACE: a hard link fails on an existing name.
  if (::link(tmp.c_str(), path.c_str()) != 0) return false;
  ::unlink(tmp.c_str());
  return true;
}

}  // namespace

CLI::Option* add_overwrite(CLI::App* cmd, bool& overwrite) {
  return cmd->add_flag("--overwrite", overwrite,
                       "replace output files that exist (by default an existing file is an error)");
}

void check_output_path(const std::string& path, const std::string& flag, bool overwrite,
                       bool offer_overwrite) {
  AS_CHECK(!path.empty(), flag, " needs a file name");
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    const bool directory = fs::is_directory(path);
    AS_CHECK(!(directory && offer_overwrite), flag, " '", path,
             "' is a directory; give the name of a file to write");
    AS_CHECK(overwrite, flag, " '", path, "' already exists; remove it or choose another name",
             offer_overwrite ? ", or give --overwrite to replace it" : "");
    AS_CHECK(fs::is_regular_file(path), flag, " '", path,
             "' is not a regular file (a pipe, socket or device); --overwrite replaces only files");
  }
  const std::string parent = parent_of(path);
  struct stat pst {};
  AS_CHECK(::stat(parent.c_str(), &pst) == 0, flag, " '", path, "': directory '", parent,
           "' does not exist (create it first)");
  AS_CHECK(S_ISDIR(pst.st_mode), flag, " '", path, "': '", parent, "' is not a directory");
}

void write_output_file(const std::string& path, const std::string& flag, const std::string& text,
                       bool overwrite) {
  check_output_path(path, flag, overwrite);
  const std::string tmp = temporary_beside(path);
  write_new_file(tmp, path, flag, text);
  const bool moved =
      overwrite ? ::rename(tmp.c_str(), path.c_str()) == 0 : move_without_replacing(tmp, path);
  const int error = errno;
  if (!moved) ::unlink(tmp.c_str());
  AS_CHECK(moved, flag, " '", path, "' cannot be written: ", std::strerror(error),
           error == EEXIST ? " (it appeared while this command ran; nothing was replaced)" : "");
}

std::ofstream open_output_stream(const std::string& path, const std::string& flag, bool overwrite,
                                 bool append) {
  if (append) {
    AS_CHECK(!fs::exists(path) || fs::is_regular_file(path), flag, " '", path,
             "' is not a regular file; give the name of a file to append to");
  } else {
    check_output_path(path, flag, overwrite);
    if (!overwrite) {  // created here, so no other file is ever truncated
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      AS_CHECK(fd >= 0, flag, " '", path, "' cannot be created: ", std::strerror(errno));
      ::close(fd);
    }
  }
  std::ofstream out(path, append ? std::ios::app : std::ios::trunc);
  AS_CHECK(out.good(), flag, " '", path, "' cannot be written");
  return out;
}

}  // namespace autoshard::cli
