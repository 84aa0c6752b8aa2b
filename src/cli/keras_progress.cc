#include "cli/keras_progress.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>

namespace autoshard::cli {
namespace {

constexpr int kWidth = 20;  // Keras 3's bar width

// "3s", "1:02", "1:01:05": a duration as Keras prints ETAs and epoch times.
std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(std::llround(std::max(0.0, seconds)));
  char out[32];
  if (s < 60)
    std::snprintf(out, sizeof out, "%llds", s);
  else if (s < 3600)
    std::snprintf(out, sizeof out, "%lld:%02lld", s / 60, s % 60);
  else
    std::snprintf(out, sizeof out, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
  return out;
}

// "95ms/step" (or "2s/step", "830us/step").
std::string format_per_step(double seconds) {
  char out[32];
  if (seconds >= 1)
    std::snprintf(out, sizeof out, "%.0fs/step", seconds);
  else if (seconds >= 1e-3)
    std::snprintf(out, sizeof out, "%.0fms/step", seconds * 1e3);
  else
    std::snprintf(out, sizeof out, "%.0fus/step", seconds * 1e6);
  return out;
}

}  // namespace

std::string format_logs(const std::map<std::string, double>& logs) {
  std::string out;
  char value[64];
  for (const auto& [name, v] : logs) {
    std::snprintf(value, sizeof value, "%.4f", v);
    out += " - " + name + ": " + value;
  }
  return out;
}

KerasProgress::KerasProgress(int verbose, bool enabled, int epochs)
    : verbose_(verbose),
      enabled_(enabled && verbose > 0),
      tty_(::isatty(STDERR_FILENO) != 0),
      epochs_(epochs),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void KerasProgress::epoch_begin(int epoch, int64_t steps) {
  steps_ = steps;
  done_ = 0;
  start_ = last_draw_ = std::chrono::steady_clock::now();
  if (enabled_) std::fprintf(stderr, "Epoch %d/%d\n", epoch + 1, epochs_);
}

std::string KerasProgress::line(int64_t done, bool final,
                                const std::map<std::string, double>& logs) const {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = done > 0 ? elapsed / double(done) : 0;
  std::string out = std::to_string(done) + "/" + std::to_string(steps_);
  if (verbose_ == 1) {
    const int filled = steps_ > 0 ? static_cast<int>(done * kWidth / steps_) : kWidth;
    std::string bar;
    for (int i = 0; i < kWidth; ++i) bar += i < filled ? "\u2501" : "\u2500";
    out += " " + bar + " ";
  } else {
    out += " - ";
  }
  out += format_duration(final ? elapsed : per_step * double(steps_ - done)) + " " +
         format_per_step(per_step) + format_logs(logs);
  return out;
}

void KerasProgress::step_end(int64_t done, const std::map<std::string, double>& logs) {
  done_ = done;
  if (!enabled_ || verbose_ != 1 || !tty_ || done >= steps_) return;
  // A terminal redraws at most 20 times a second, as Keras does.
  const auto now = std::chrono::steady_clock::now();
  if (done > 1 && now - last_draw_ < std::chrono::milliseconds(50)) return;
  last_draw_ = now;
  std::fprintf(stderr, "\r%s\x1b[K", line(done, false, logs).c_str());
}

void KerasProgress::epoch_end(const std::map<std::string, double>& logs) {
  if (!enabled_) return;
  std::fprintf(stderr, "%s%s\n", tty_ && verbose_ == 1 ? "\r\x1b[K" : "",
               line(done_, true, logs).c_str());
}

void KerasProgress::show_only(int64_t steps, const std::map<std::string, double>& logs) {
  if (!enabled_) return;
  steps_ = done_ = steps;
  std::fprintf(stderr, "%s\n", line(steps, true, logs).c_str());
}

}  // namespace autoshard::cli
