// File helpers of the io layer: errors of the standard library's filesystem
// calls become autoshard::Error (the API throws nothing else), and a
// directory is written as a whole or not at all.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

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

// How a directory save treats a directory already at its path.
struct DirectorySave {
  // A directory that exists and is not empty is refused unless this is set;
  // even then only the files the save writes are replaced, the rest kept.
  bool overwrite = false;
  // Files the format's readers look for (model.safetensors and its index,
  // ...): one that this save does not write but an earlier one left would be
  // read instead of what was saved, so it is refused by name.
  std::vector<std::string> read_names;
};

// The weight files a Hugging Face directory's readers look for.
inline std::vector<std::string> hf_weight_files() {
  return {"model.safetensors", "model.safetensors.index.json"};
}

// Writes a directory through `fill` into a temporary sibling, then renames
// it into place when `dir` is new, or moves each file it holds into an
// existing empty directory (or, with `how.overwrite`, a non-empty one),
// keeping what else is there. A path that is a file is refused; nothing of
// the user's is ever removed. On an error before the move the temporary is
// removed and `dir` is left as it was. Under mpirun a collective: every rank
// checks and calls `fill` on the same temporary, the leader creates and
// moves it.
void write_directory_atomically(const std::string& dir,
                                const std::function<void(const std::filesystem::path&)>& fill,
                                const DirectorySave& how = {});

}  // namespace autoshard
