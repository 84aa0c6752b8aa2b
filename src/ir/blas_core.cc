#include "autoshard/ir/blas_core.h"

#include <cblas.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
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

// A second OpenBLAS loaded from a copy of the process's library, with the
// kernels the CPU deserves (use_private_openblas).
struct PrivateOpenBlas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  std::string core;         // the copy's openblas_get_corename()
  std::string shared_core;  // what the process's library runs (or the hook's name)
};
std::atomic<const PrivateOpenBlas*> private_openblas{nullptr};

// The core the process's OpenBLAS chose, or the test hook's name in its
// place (unless a core type was forced: then the library's own answer counts).
std::string shared_library_core() {
  if (!variable("OPENBLAS_CORETYPE"))
    if (auto simulated = variable(kSimulate)) return *simulated;
  return openblas_get_corename();
}

// The core autoshard's products run on.
std::string library_core() {
  if (const PrivateOpenBlas* copy = private_openblas.load()) return copy->core;
  return shared_library_core();
}

// RTLD_DEEPBIND, which keeps the copy's calls inside the copy, is refused by
// the sanitizers' runtimes.
constexpr bool kSanitized =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

// The file the process's OpenBLAS was loaded from: the one defining
// openblas_get_corename (Debian's libblas.so.3, which NumPy loads, defines
// cblas_sgemm too, as a thin layer over libopenblas.so.0).
std::optional<std::string> shared_library_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&openblas_get_corename), &info) == 0 ||
      info.dli_fname == nullptr)
    return std::nullopt;
  return std::string(info.dli_fname);
}

// A copy of `path` in an anonymous memory file: a new inode, so the dynamic
// loader maps it as a library of its own. -1 on failure (errno set).
int copy_into_memory(const std::string& path) {
  const int source = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (source < 0) return -1;
  struct stat st {};
  const int copy =
      ::fstat(source, &st) == 0 ? ::memfd_create("autoshard-openblas", MFD_CLOEXEC) : -1;
  off_t done = 0;
  while (copy >= 0 && done < st.st_size)
    if (::sendfile(copy, source, &done, static_cast<size_t>(st.st_size - done)) <= 0) break;
  const int error = errno;
  ::close(source);
  if (copy >= 0 && done == st.st_size) return copy;
  if (copy >= 0) ::close(copy);
  errno = error;
  return -1;
}

// dlopen of the copy with OPENBLAS_CORETYPE=core, which its constructor
// reads; the variable is restored afterwards so child processes do not
// inherit it.
void* open_with_core(int fd, const std::string& core) {
  const std::optional<std::string> before = variable("OPENBLAS_CORETYPE");
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (before)
    ::setenv("OPENBLAS_CORETYPE", before->c_str(), 1);
  else
    ::unsetenv("OPENBLAS_CORETYPE");
  return handle;
}

// Loads the copy and checks it runs `core`; the reason on failure.
std::string load_private_openblas(const std::string& core) {
  const std::optional<std::string> path = shared_library_path();
  if (!path) return "the loaded OpenBLAS's file was not found";
  const int fd = copy_into_memory(*path);
  if (fd < 0) return "copying " + *path + " failed (" + std::strerror(errno) + ")";
  void* handle = open_with_core(fd, core);
  ::close(fd);  // the mapping keeps the copy
  if (handle == nullptr)
    return std::string("loading a copy of OpenBLAS failed (") + ::dlerror() + ")";
  auto* sgemm = reinterpret_cast<decltype(&cblas_sgemm)>(::dlsym(handle, "cblas_sgemm"));
  auto* threads = reinterpret_cast<void (*)(int)>(::dlsym(handle, "openblas_set_num_threads"));
  auto* corename = reinterpret_cast<char* (*)()>(::dlsym(handle, "openblas_get_corename"));
  if (sgemm == nullptr || threads == nullptr || corename == nullptr ||
      lower(corename()) != lower(core)) {
    ::dlclose(handle);
    return "a copy of OpenBLAS did not run the " + core + " kernels";
  }
  threads(1);  // as parallel_blas_gemm runs the process's library
  // Lives as long as the process: products may run until exit.
  private_openblas.store(new PrivateOpenBlas{sgemm, corename(), shared_library_core()});
  return "";
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
  if (const PrivateOpenBlas* copy = private_openblas.load()) {
    info.chosen_by = "autoshard";
    info.library_choice = copy->shared_core;
    info.private_copy = true;
    return info;
  }
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
  if (info.private_copy) who += " when loaded before autoshard; autoshard runs a private copy";
  const auto forced = variable("OPENBLAS_CORETYPE");
  if (forced && !info.private_copy && lower(*forced) != lower(info.core))
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

std::string use_private_openblas() {
  if (private_openblas.load() != nullptr) return "";
  const std::optional<std::string> better = wanted_openblas_coretype();
  if (!better) return "";
  if (kSanitized) return "a private copy of OpenBLAS cannot be loaded under the sanitizers";
  static std::mutex one_at_a_time;
  const std::lock_guard<std::mutex> lock(one_at_a_time);
  return private_openblas.load() != nullptr ? "" : load_private_openblas(*better);
}

void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc) {
  const PrivateOpenBlas* copy = private_openblas.load(std::memory_order_acquire);
  (copy != nullptr ? copy->sgemm : &cblas_sgemm)(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                                                 trans_b ? CblasTrans : CblasNoTrans, m, n, k,
                                                 alpha, a, lda, b, ldb, beta, c, ldc);
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
