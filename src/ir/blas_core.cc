#include "autoshard/ir/blas_core.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "autoshard/error.h"
#include "autoshard/tensor/parallel.h"
#include "ir/ops/gemm.h"

namespace autoshard::blas {

namespace {

// Set by the restart to the core OpenBLAS chose by itself, so the restarted
// process can say so (and tell its OPENBLAS_CORETYPE from the user's).
constexpr const char* kLibraryChoice = "AUTOSHARD_OPENBLAS_OWN_CORE";
constexpr const char* kSimulate = "AUTOSHARD_SIMULATE_BLAS_CORE";
constexpr const char* kKeep = "AUTOSHARD_KEEP_BLAS_CORE";

// An unset or empty variable reads as nothing.
std::optional<std::string> variable(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// The instruction-set level an OpenBLAS x86-64 core type's kernels use:
// 0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512, 4 AVX-512 with BF16; -1 for a name
// not known here. Names as openblas_get_corename() and OPENBLAS_CORETYPE
// spell them (dynamic.c of OpenBLAS 0.3.x), compared in lower case.
int level_of(std::string_view corename) {
  static const std::vector<std::pair<std::string_view, int>> levels = {
      {"katmai", 0},        {"coppermine", 0},   {"northwood", 0},     {"prescott", 0},
      {"banias", 0},        {"atom", 0},         {"core2", 0},         {"penryn", 0},
      {"dunnington", 0},    {"nehalem", 0},      {"athlon", 0},        {"opteron", 0},
      {"opteron(sse3)", 0}, {"opteron_sse3", 0}, {"barcelona", 0},     {"nano", 0},
      {"bobcat", 0},        {"sandybridge", 1},  {"bulldozer", 1},     {"piledriver", 1},
      {"steamroller", 1},   {"haswell", 2},      {"excavator", 2},     {"zen", 2},
      {"skylakex", 3},      {"cooperlake", 4},   {"sapphirerapids", 4}};
  const std::string name = lower(corename);
  for (const auto& [n, level] : levels)
    if (n == name) return level;
  return -1;
}

int level_of(const CpuFeatures& f) {
  const bool avx512 = f.avx512f && f.avx512cd && f.avx512bw && f.avx512dq && f.avx512vl;
  if (avx512 && f.avx512_bf16) return 4;
  if (avx512) return 3;
  if (f.avx2 && f.fma) return 2;
  return f.avx ? 1 : 0;
}

bool dynamic_arch() {
  return std::strstr(openblas_get_config(), "DYNAMIC_ARCH") != nullptr;
}

// The core OpenBLAS chose, or the test hook's name in its place (unless a
// core type was forced: then the library's own answer counts).
std::string library_core() {
  if (!variable("OPENBLAS_CORETYPE"))
    if (auto simulated = variable(kSimulate)) return *simulated;
  return openblas_get_corename();
}

}  // namespace

CpuFeatures CpuFeatures::of_this_cpu() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  // GCC's checks include the operating system's support (xgetbv): AVX-512
  // registers the kernel does not save read as absent.
  __builtin_cpu_init();
  f.avx = __builtin_cpu_supports("avx");
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512cd = __builtin_cpu_supports("avx512cd");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512_bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  return f;
}

std::string CpuFeatures::describe() const {
  std::string out;
  auto add = [&out](const char* s) { out += (out.empty() ? "" : ", ") + std::string(s); };
  const int level = level_of(*this);
  if (level >= 3) add(level == 4 ? "AVX-512 (BF16)" : "AVX-512");
  if (avx2) add("AVX2");
  if (fma) add("FMA");
  if (avx && !avx2) add("AVX");
  return out.empty() ? "SSE only" : out;
}

std::string best_openblas_coretype(const CpuFeatures& features) {
  switch (level_of(features)) {
    case 4:
      return "Cooperlake";
    case 3:
      return "SkylakeX";
    case 2:
      return "Haswell";
    case 1:
      return "Sandybridge";
    default:
      return "";
  }
}

std::optional<std::string> better_openblas_coretype(std::string_view corename,
                                                    const CpuFeatures& features) {
  const int have = level_of(corename);
  if (have < 0 || have >= level_of(features)) return std::nullopt;
  return best_openblas_coretype(features);
}

BlasInfo blas_info() {
  BlasInfo info;
  info.config = openblas_get_config();
  // The config starts "OpenBLAS 0.3.21 ...": the library and its version.
  const size_t first = info.config.find(' ');
  const size_t second = first == std::string::npos ? first : info.config.find(' ', first + 1);
  info.library = info.config.substr(0, second);
  info.core = library_core();
  info.features = CpuFeatures::of_this_cpu();
  info.best = best_openblas_coretype(info.features);
  info.threads = intra_op_threads();
  info.chosen_by = "OpenBLAS";
  if (const auto forced = variable("OPENBLAS_CORETYPE")) {
    info.chosen_by = "OPENBLAS_CORETYPE";
    // The restart's own setting: what autoshard would ask for after the
    // library's recorded choice.
    if (const auto own = variable(kLibraryChoice))
      if (better_openblas_coretype(*own, info.features) == *forced) {
        info.chosen_by = "autoshard";
        info.library_choice = *own;
      }
  }
  return info;
}

std::string describe(const BlasInfo& info) {
  std::string who = info.chosen_by == "autoshard"
                        ? "set by autoshard, OpenBLAS chose " + info.library_choice
                        : "chosen by " + info.chosen_by;
  const auto forced = variable("OPENBLAS_CORETYPE");
  if (forced && lower(*forced) != lower(info.core))
    who = "chosen by OpenBLAS, which does not know OPENBLAS_CORETYPE=" + *forced;
  std::string fix;  // what gets the faster kernels, when a setting kept them away
  if (better_openblas_coretype(info.core, info.features)) {
    who += ", below this CPU's " + info.best;
    if (forced)
      fix = "; for the faster kernels unset OPENBLAS_CORETYPE or set it to " + info.best;
    else if (variable(kKeep))
      fix = std::string("; for the faster kernels unset ") + kKeep;
  }
  return info.library + ", core " + info.core + " (" + who + "; CPU has " +
         info.features.describe() + ")" + fix;
}

std::optional<std::string> wanted_openblas_coretype() {
  if (const auto keep = variable(kKeep))
    AS_CHECK(*keep == "1", kKeep, " is '", *keep,
             "': set it to 1 to keep the kernels OpenBLAS chooses, or unset it");
  if (variable(kKeep) || variable("OPENBLAS_CORETYPE") || !dynamic_arch()) return std::nullopt;
  return better_openblas_coretype(library_core(), CpuFeatures::of_this_cpu());
}

void use_best_blas_kernels(char** argv) {
  const std::optional<std::string> better = wanted_openblas_coretype();
  if (!better) return;
  const std::string chosen = library_core();
  const CpuFeatures features = CpuFeatures::of_this_cpu();
  // OpenBLAS reads the variable when it loads, before main: only a new
  // program image sees it. Same pid, so mpirun still knows the rank.
  ::setenv("OPENBLAS_CORETYPE", better->c_str(), 1);
  ::setenv(kLibraryChoice, chosen.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  const int error = errno;
  ::unsetenv("OPENBLAS_CORETYPE");
  ::unsetenv(kLibraryChoice);
  std::fprintf(stderr,
               "autoshard: warning: OpenBLAS runs its %s kernels on a CPU with %s; restarting "
               "with OPENBLAS_CORETYPE=%s failed (%s): set that variable before starting\n",
               chosen.c_str(), features.describe().c_str(), better->c_str(), std::strerror(error));
}

double sgemm_peak_gflops(int n, double seconds) {
  AS_CHECK(n >= 1 && seconds >= 0, "sgemm_peak_gflops: size ", n, " and seconds ", seconds);
  const size_t elements = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(elements, 0.5f), b(elements, 0.25f), c(elements);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  double best = 0;
  // The first call warms up (the library's buffers and threads).
  for (int call = 0; call < 4 || Clock::now() - start < std::chrono::duration<double>(seconds);
       ++call) {
    const auto t0 = Clock::now();
    parallel_blas_gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (call > 0 && s > 0) best = std::max(best, 2.0 * n * double(n) * n / s * 1e-9);
  }
  return best;
}

}  // namespace autoshard::blas
