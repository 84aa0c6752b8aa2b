// Runs the autoshard command as a user would, for the tests of the CLI: the
// command line through a shell (so `env` may set variables or limits), with
// a time limit, stdout and stderr together.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace autoshard::cli_runner {

struct Result {
  int code = -1;       // exit code; 124: the time limit ended it, -1: a signal
  std::string output;  // stdout and stderr
  double seconds = 0;  // wall time
};

// The time limit only catches hangs. Sanitizers run the same work 5-20x
// slower (GPT-3 175B priced on 1024 devices: 4-8 s optimised, 131 s under
// ThreadSanitizer on 2 cores), so their builds stretch it.
#ifdef AUTOSHARD_SANITIZED
inline constexpr int kTimeLimitScale = 10;
#else
inline constexpr int kTimeLimitScale = 1;
#endif

// `env` goes before the command (variables, or `ulimit ...;`).
inline Result run(const std::string& args, const std::string& env = "", int timeout_s = 60) {
  const std::string cmd = env + " timeout " + std::to_string(timeout_s * kTimeLimitScale) + " " +
                          std::string(AUTOSHARD_CLI) + " " + args + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

// How many times `needle` occurs in `haystack` (overlaps counted).
inline int count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (size_t at = haystack.find(needle); at != std::string::npos;
       at = haystack.find(needle, at + 1))
    ++n;
  return n;
}

}  // namespace autoshard::cli_runner
