// File helpers of the io layer: errors of the standard library's filesystem
// calls become autoshard::Error (the API throws nothing else), and a
// directory is written as a whole or not at all.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

#include "autoshard/error.h"

namespace autoshard {

// Runs `f`; a std::filesystem error becomes an autoshard::Error that says
// what was being done, with the system's reason and the path.
template <typename F>
decltype(auto) filesystem_step(const std::string& what, F&& f) {
  try {
    return f();
  } catch (const std::filesystem::filesystem_error& e) {
    fail(what, ": ", e.code().message(), " ('", e.path1().string(), "')");
  }
}

// Flushes a file (or a directory's entries) to disk; errors are ignored.
void fsync_path(const std::string& path, bool directory);
// Writes `text` to `path` (replacing it) and flushes it to disk; under
// mpirun the leader alone writes (the ranks share the directory).
void write_text(const std::string& path, const std::string& text);

// Writes a directory through `fill` into a temporary sibling, then renames it
// into place (replacing an existing `dir`); on any error the temporary is
// removed and `dir` is left as it was. Under mpirun a collective: every rank
// calls `fill` on the same temporary, the leader creates and renames it.
void write_directory_atomically(const std::string& dir,
                                const std::function<void(const std::filesystem::path&)>& fill);

}  // namespace autoshard
