#include "cli/agreement.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "autoshard/comm/world.h"

namespace autoshard::cli {

namespace {

namespace fs = std::filesystem;

// Paths the command writes: compared by name only (rank 0 alone writes
// them, and they need not exist on other hosts).
const std::set<std::string> kOutputs = {"--log",  "--out", "--export-problem", "--checkpoint-dir",
                                        "--save", "OUT"};
constexpr size_t kHeadBytes = 64 << 10;  // a weight file's header lies within
constexpr int kMaxDirectoryFiles = 4096;

uint64_t fnv1a(const char* data, size_t n, uint64_t h = 14695981039346656037ull) {
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(data[i])) * 1099511628211ull;
  return h;
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

// "<size> bytes, head <hash>" of a regular file (never opens anything else:
// a FIFO would block).
std::string file_identity(const std::string& path, const struct stat& st) {
  std::string head(kHeadBytes, '\0');
  ssize_t got = -1;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    got = ::pread(fd, head.data(), head.size(), 0);
    ::close(fd);
  }
  if (got < 0) return std::to_string(st.st_size) + " bytes, unreadable";
  return std::to_string(st.st_size) + " bytes, head " + hex(fnv1a(head.data(), size_t(got)));
}

// What a path names, for comparing across hosts: a file's size and head, a
// directory's regular files (not its subdirectories) the same way.
std::string identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "no such file";
  if (S_ISREG(st.st_mode)) return "a file of " + file_identity(path, st);
  if (!S_ISDIR(st.st_mode)) return "not a regular file";
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(path, ec)) {
    if (static_cast<int>(names.size()) == kMaxDirectoryFiles) break;
    if (entry.is_regular_file(ec)) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  std::string all;
  for (const std::string& name : names) {
    struct stat f {};
    const std::string file = (fs::path(path) / name).string();
    if (::stat(file.c_str(), &f) == 0) all += name + ": " + file_identity(file, f) + "\n";
  }
  return "a directory of " + std::to_string(names.size()) + " files, hash " +
         hex(fnv1a(all.data(), all.size()));
}

// Every option of `cmd` as given (or "(not given)"), then the identity of
// each input path an option names.
World::Settings settings_of(const CLI::App& cmd) {
  World::Settings settings{{"the command", cmd.get_name()}};
  World::Settings files;
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string name = opt->get_name();
    if (name == "--help" || name.empty()) continue;
    std::string value;
    for (const std::string& r : opt->results()) value += (value.empty() ? "" : " ") + r;
    settings.emplace_back(name, opt->count() > 0 ? value : "(not given)");
    if (kOutputs.count(name) != 0) continue;
    for (const std::string& r : opt->results()) {
      std::error_code ec;
      if (!r.empty() && fs::exists(r, ec))
        files.emplace_back("the contents of " + name + " '" + r + "'", identity(r));
    }
  }
  settings.insert(settings.end(), files.begin(), files.end());
  return settings;
}

}  // namespace

void require_agreement_across_ranks(CLI::App& app) {
  if (!World::process().distributed()) return;
  for (CLI::App* cmd : app.get_subcommands([](CLI::App*) { return true; }))
    cmd->parse_complete_callback(
        [cmd] { World::process().require_same_settings(settings_of(*cmd)); });
}

}  // namespace autoshard::cli
