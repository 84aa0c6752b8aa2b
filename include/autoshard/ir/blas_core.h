// Which OpenBLAS kernels this process runs, and making them the best ones
// for the CPU.
//
// OpenBLAS built with DYNAMIC_ARCH (as Debian ships it) picks its kernels
// ("core type") from the CPU's family and model when the library loads. A CPU
// newer than the library falls back to its SSE3 "Prescott" kernels: Debian's
// 0.3.21 on an Intel Xeon of family 6, model 207 (AVX-512) runs sgemm at 64
// GFLOP/s on 2 threads where its SkylakeX kernels reach 150. The
// instruction-set extensions the CPU and its operating system support
// (cpuid and xgetbv) say which kernels can run; `use_best_blas_kernels`
// restarts the program with OPENBLAS_CORETYPE naming them when OpenBLAS chose
// kernels below them (the variable is read only when the library loads,
// before main). A core type the user set in OPENBLAS_CORETYPE is kept.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace autoshard::blas {

// The extensions that decide which OpenBLAS x86-64 kernels can run, as the
// CPU and the operating system (its saved register state) support them.
struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false;
  // SkylakeX's set: F, CD, BW, DQ, VL (Knights Landing has only F and CD).
  bool avx512f = false, avx512cd = false, avx512bw = false, avx512dq = false, avx512vl = false;
  bool avx512_bf16 = false;  // Cooperlake's addition

  static CpuFeatures of_this_cpu();
  // "AVX-512 (BF16), AVX2, FMA", "AVX", "SSE only".
  std::string describe() const;
};

// The best OpenBLAS core type for these features ("Cooperlake", "SkylakeX",
// "Haswell", "Sandybridge"), or "" where only the SSE kernels can run.
std::string best_openblas_coretype(const CpuFeatures& features);

// The core type to ask for when OpenBLAS chose `corename` (any case) on a CPU
// with `features`: the best for the features when OpenBLAS's choice uses
// fewer of them; nothing when its choice is as good, or is a name not known
// here (kept: it may be newer than this list).
std::optional<std::string> better_openblas_coretype(std::string_view corename,
                                                    const CpuFeatures& features);

// What this process runs.
struct BlasInfo {
  std::string library;  // "OpenBLAS 0.3.21"
  std::string config;   // openblas_get_config(): build options and core
  std::string core;     // openblas_get_corename(), or the simulated name
  // Who chose `core`: "OpenBLAS", "OPENBLAS_CORETYPE" (the user), or
  // "autoshard" (then `library_choice` holds the core OpenBLAS had chosen).
  std::string chosen_by;
  std::string library_choice;
  std::string best;  // best_openblas_coretype for this CPU ("" if SSE only)
  // autoshard's products run on a private copy of the library (use_private_openblas).
  bool private_copy = false;
  int threads = 1;  // the cores a product runs on (ir/ops/gemm.h: one BLAS thread each)
  CpuFeatures features;
};

BlasInfo blas_info();

// One line: "OpenBLAS 0.3.21, core SkylakeX (set by autoshard: OpenBLAS chose
// Prescott; CPU: AVX-512, AVX2, FMA)".
std::string describe(const BlasInfo& info);

// The core type this process should have been started with: what
// use_best_blas_kernels would set OPENBLAS_CORETYPE to, or nothing (already
// the best, OPENBLAS_CORETYPE or AUTOSHARD_KEEP_BLAS_CORE set, an OpenBLAS
// built for one core). For a process that cannot restart itself (Python):
// ask it in a child (fork, load the library, answer), then set the variable
// before the library loads in the parent.
std::optional<std::string> wanted_openblas_coretype();

// Restarts this program (execv of /proc/self/exe with the same argv) with
// OPENBLAS_CORETYPE set to the best core type for the CPU when OpenBLAS runs
// kernels below it; returns when nothing needs doing or the restart failed
// (a warning on stderr). Call first thing in main, before threads or MPI_Init:
// under mpirun a rank may exec itself until it has called MPI_Init. Does
// nothing when OPENBLAS_CORETYPE is set (the user's choice, or this restart's
// own: no loop), when AUTOSHARD_KEEP_BLAS_CORE is set (to measure the
// library as shipped), or for an OpenBLAS built for one core.
// AUTOSHARD_SIMULATE_BLAS_CORE=NAME, a test hook, makes autoshard act as if
// OpenBLAS had chosen NAME.
void use_best_blas_kernels(char** argv);

// For a process whose OpenBLAS loaded before autoshard could choose its
// kernels (Python with NumPy imported first: the two share the library, and
// its kernels are fixed once it has loaded): when wanted_openblas_coretype()
// names better kernels, loads a second copy of the same library file (copied
// into an anonymous memory file, so the dynamic loader maps it apart, with
// RTLD_DEEPBIND so that its calls stay inside it) with OPENBLAS_CORETYPE
// naming them, and runs autoshard's products (`sgemm`) on it. The rest of
// the process (NumPy) keeps the library it loaded. Costs a copy of the
// library in memory (36 MB for Debian's 0.3.21) and ~30 ms, once. Returns ""
// when done or not needed, else why not (nothing changed; a warning's text).
// Not available under AddressSanitizer or ThreadSanitizer.
std::string use_private_openblas();

// C = alpha op(A) op(B) + beta C on row-major matrices, on the calling
// thread: OpenBLAS's cblas_sgemm, from the private copy once
// use_private_openblas loaded one.
void sgemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
           const float* b, int ldb, float beta, float* c, int ldc);

// sgemm on square matrices of size n as autoshard runs it (pieces over the
// calling thread's cores, one OpenBLAS thread each): the best
// GFLOP/s over calls taking about `seconds` in all (at least 3 calls).
double sgemm_peak_gflops(int n = 1024, double seconds = 0.15);

}  // namespace autoshard::blas
