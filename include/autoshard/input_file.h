// Files a user hands autoshard. Only regular files are read where a file is
// expected: a FIFO would block forever and a device (/dev/zero) never ends.
// Reads are bounded, so a huge or endless input is an error, not an
// allocation that takes the machine down. A file that a directory names (a
// TensorFlow.js shard, a preset's weights or assets, a Hugging Face
// directory's config, weights or tokenizer) must lie inside that directory
// after symbolic links. Below every layer, like error.h.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "autoshard/error.h"

namespace autoshard {

// Throws unless `path` names a regular file (symbolic links followed).
// `what` names the input for the message: "--data", "tokenizer.json", ...
inline void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(what, " '", path, "' cannot be read: ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(what, " '", path, "' is a directory; give a file");
  AS_CHECK(S_ISREG(st.st_mode), what, " '", path,
           "' is not a regular file (a pipe, socket or device); give a file");
}

// The size in bytes of a regular file (checked as above).
inline uint64_t input_file_size(const std::string& path, const std::string& what) {
  require_regular_file(path, what);
  struct stat st {};
  ::stat(path.c_str(), &st);
  return static_cast<uint64_t>(st.st_size);
}

// Reads a whole regular file of at most `max_bytes` bytes.
inline std::string read_input_file(const std::string& path, const std::string& what,
                                   uint64_t max_bytes) {
  const uint64_t size = input_file_size(path, what);
  AS_CHECK(size <= max_bytes, what, " '", path, "' is ", size, " bytes, more than the ", max_bytes,
           " accepted; is it the right file?");
  std::ifstream in(path, std::ios::binary);
  AS_CHECK(in, what, " '", path, "' cannot be opened");
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  AS_CHECK(in.gcount() == static_cast<std::streamsize>(size), what, " '", path,
           "' could not be read whole");
  return text;
}

namespace input_file_detail {

// The canonical path of an existing `path` (symbolic links resolved), or ""
// with errno set.
inline std::string real_path(const std::string& path) {
  std::unique_ptr<char, decltype(&::free)> r(::realpath(path.c_str(), nullptr), &::free);
  return r ? std::string(r.get()) : std::string();
}

// Whether canonical `path` lies strictly inside canonical directory `root`.
inline bool lies_inside(const std::string& path, const std::string& root) {
  if (root == "/") return path.size() > 1;
  return path.size() > root.size() + 1 && path.compare(0, root.size(), root) == 0 &&
         path[root.size()] == '/';
}

// The canonical path of `dir`/`name` after checking that `name` is relative
// and that the path lies inside `dir` after symbolic links (see below).
inline std::string resolve_inside(const std::string& dir, const std::string& name,
                                  const std::string& what) {
  namespace fs = std::filesystem;
  const std::string path = (fs::path(dir) / name).string();
  AS_CHECK(!name.empty() && name[0] != '/' && name.find('\0') == std::string::npos, what, " '",
           name, "' of '", dir, "' must be a relative path inside the directory");
  const std::string root = real_path(dir);
  AS_CHECK(!root.empty(), "directory '", dir, "' cannot be read: ", std::strerror(errno));
  const std::string real = real_path(path);
  AS_CHECK(!real.empty(), what, " '", path, "' cannot be read: ", std::strerror(errno));
  const fs::path snapshots = fs::path(root).parent_path();
  const bool hub_blob = snapshots.filename() == "snapshots" &&
                        lies_inside(real, (snapshots.parent_path() / "blobs").string());
  AS_CHECK(lies_inside(real, root) || hub_blob, what, " '", path,
           "' is a symbolic link (or lies under one) to something outside '", dir,
           "'; refusing to read it: copy the file into the directory");
  return real;
}

}  // namespace input_file_detail

// The path `dir`/`name` of a file that the directory-shaped input `dir`
// names, checked before anything opens it: `name` is relative (no NUL);
// after symbolic links the file lies inside `dir` (a link to a file
// elsewhere would be read, and copied into what convert writes); and it is a
// regular file (a FIFO would block the open, a device never ends). Symbolic
// links inside the directory are followed. One layout links outside: a
// Hugging Face hub cache, whose <repo>/snapshots/<revision>/ files link to
// <repo>/blobs/, which they may. `what` names the file in messages ("TF.js
// weight shard", "tokenizer file", ...); no message quotes the file.
inline std::string file_in_directory(const std::string& dir, const std::string& name,
                                     const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  const std::string real = input_file_detail::resolve_inside(dir, name, what);
  struct stat st {};
  AS_CHECK(::stat(real.c_str(), &st) == 0, what, " '", path,
           "' cannot be read: ", std::strerror(errno));
  AS_CHECK(!S_ISDIR(st.st_mode), what, " '", path, "' is a directory; a file was expected");
  AS_CHECK(S_ISREG(st.st_mode), what, " '", path,
           "' is not a regular file (a pipe, socket or device); give a file");
  return path;
}

// The same for a directory that `dir` holds (a preset's assets/).
inline std::string directory_in_directory(const std::string& dir, const std::string& name,
                                          const std::string& what) {
  const std::string path = (std::filesystem::path(dir) / name).string();
  std::error_code ec;
  AS_CHECK(std::filesystem::is_directory(input_file_detail::resolve_inside(dir, name, what), ec),
           what, " '", path, "' is not a directory");
  return path;
}

}  // namespace autoshard
