// Files a user hands autoshard. Only regular files are read where a file is
// expected: a FIFO would block forever and a device (/dev/zero) never ends.
// Reads are bounded, so a huge or endless input is an error, not an
// allocation that takes the machine down. Below every layer, like error.h.
#pragma once

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
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

}  // namespace autoshard
