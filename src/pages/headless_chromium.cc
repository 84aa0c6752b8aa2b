#include "pages/headless_chromium.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "autoshard/error.h"

extern char** environ;

namespace autoshard {

std::string find_chromium() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return "";
  for (const char* name : {"chromium", "chromium-browser", "google-chrome"}) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "";
}

std::string require_chromium(const std::string& flag) {
  const std::string chromium = find_chromium();
  AS_CHECK(!chromium.empty(), flag,
           " renders the page with a headless Chromium, and none is on PATH (chromium, "
           "chromium-browser or google-chrome); install one (Debian: apt-get install chromium, "
           "or scripts/setup.sh with AUTOSHARD_WITH_CHROMIUM=1) or open the HTML page instead");
  return chromium;
}

void render_png(const std::string& html, const std::string& png, int width, int height,
                const std::string& flag) {
  namespace fs = std::filesystem;
  const std::string chromium = require_chromium(flag);
  const std::string target = fs::absolute(png).string();
  const std::string log = target + ".chromium.log";
  // coreutils' timeout ends a Chromium that hangs; --no-sandbox lets it run
  // as root (containers); its own profile keeps the user's untouched.
  const std::string profile =
      fs::temp_directory_path() / ("autoshard-chromium-" + std::to_string(::getpid()));
  std::vector<std::string> args = {
      "timeout",
      "120",
      chromium,
      "--headless",
      "--disable-gpu",
      "--no-sandbox",
      "--hide-scrollbars",
      "--no-first-run",
      "--user-data-dir=" + profile,
      "--window-size=" + std::to_string(width) + "," + std::to_string(height),
      "--screenshot=" + target,
      "file://" + fs::absolute(html).string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, "timeout", &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  AS_CHECK(spawned == 0, flag, ": could not start ", chromium);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  std::error_code ignored;
  fs::remove_all(profile, ignored);
  std::string said;
  {
    std::ifstream in(log);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) said = line;  // its last words
  }
  fs::remove(log, ignored);
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0 && fs::exists(target);
  AS_CHECK(ok, flag, ": ", chromium, " did not render '", png, "' (",
           WIFEXITED(status) && WEXITSTATUS(status) == 124
               ? "it ran past 120 s"
               : "exit " + std::to_string(WEXITSTATUS(status)),
           said.empty() ? "" : ": " + said, ")");
}

}  // namespace autoshard
