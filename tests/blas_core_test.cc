// The choice of OpenBLAS kernels (ir/blas_core.h): the decision on simulated
// core names and feature sets, not this machine's; and the CLI's restart and
// report through the AUTOSHARD_SIMULATE_BLAS_CORE hook.
#include "autoshard/ir/blas_core.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace autoshard::blas {
namespace {

CpuFeatures sse_only() {
  return {};
}

CpuFeatures avx_only() {
  CpuFeatures f;
  f.avx = true;
  return f;
}

CpuFeatures avx2_fma() {
  CpuFeatures f = avx_only();
  f.avx2 = f.fma = true;
  return f;
}

CpuFeatures skylakex() {
  CpuFeatures f = avx2_fma();
  f.avx512f = f.avx512cd = f.avx512bw = f.avx512dq = f.avx512vl = true;
  return f;
}

CpuFeatures cooperlake() {
  CpuFeatures f = skylakex();
  f.avx512_bf16 = true;
  return f;
}

TEST(BlasCore, BestCoreTypeFollowsTheFeatures) {
  EXPECT_EQ(best_openblas_coretype(sse_only()), "");
  EXPECT_EQ(best_openblas_coretype(avx_only()), "Sandybridge");
  EXPECT_EQ(best_openblas_coretype(avx2_fma()), "Haswell");
  EXPECT_EQ(best_openblas_coretype(skylakex()), "SkylakeX");
  EXPECT_EQ(best_openblas_coretype(cooperlake()), "Cooperlake");
  // AVX2 without FMA cannot run Haswell's kernels.
  CpuFeatures no_fma = avx2_fma();
  no_fma.fma = false;
  EXPECT_EQ(best_openblas_coretype(no_fma), "Sandybridge");
  // Knights Landing: AVX-512 F and CD but not SkylakeX's BW, DQ, VL.
  CpuFeatures knl = avx2_fma();
  knl.avx512f = knl.avx512cd = true;
  EXPECT_EQ(best_openblas_coretype(knl), "Haswell");
}

TEST(BlasCore, FallbackKernelsAreUpgraded) {
  // The machine: Debian's OpenBLAS 0.3.21 on family 6 model 207.
  EXPECT_EQ(better_openblas_coretype("Prescott", skylakex()), "SkylakeX");
  EXPECT_EQ(better_openblas_coretype("Prescott", cooperlake()), "Cooperlake");
  EXPECT_EQ(better_openblas_coretype("PRESCOTT", avx2_fma()), "Haswell");
  EXPECT_EQ(better_openblas_coretype("Nehalem", avx_only()), "Sandybridge");
  EXPECT_EQ(better_openblas_coretype("Haswell", skylakex()), "SkylakeX");
  EXPECT_EQ(better_openblas_coretype("Sandybridge", avx2_fma()), "Haswell");
  EXPECT_EQ(better_openblas_coretype("Opteron(SSE3)", avx2_fma()), "Haswell");
}

TEST(BlasCore, GoodOrUnknownChoicesAreKept) {
  EXPECT_EQ(better_openblas_coretype("SkylakeX", skylakex()), std::nullopt);
  EXPECT_EQ(better_openblas_coretype("Cooperlake", cooperlake()), std::nullopt);
  EXPECT_EQ(better_openblas_coretype("SapphireRapids", cooperlake()), std::nullopt);
  // Zen and Excavator are OpenBLAS's own AVX2 choices for AMD.
  EXPECT_EQ(better_openblas_coretype("Zen", avx2_fma()), std::nullopt);
  EXPECT_EQ(better_openblas_coretype("Excavator", avx2_fma()), std::nullopt);
  // A choice above the features (forced by a user) is not ours to lower.
  EXPECT_EQ(better_openblas_coretype("Cooperlake", skylakex()), std::nullopt);
  EXPECT_EQ(better_openblas_coretype("Prescott", sse_only()), std::nullopt);
  // A name newer than this list: kept.
  EXPECT_EQ(better_openblas_coretype("GraniteRapids", skylakex()), std::nullopt);
  EXPECT_EQ(better_openblas_coretype("", skylakex()), std::nullopt);
}

TEST(BlasCore, FeaturesAreDescribed) {
  EXPECT_EQ(sse_only().describe(), "SSE only");
  EXPECT_EQ(avx_only().describe(), "AVX");
  EXPECT_EQ(avx2_fma().describe(), "AVX2, FMA");
  EXPECT_EQ(skylakex().describe(), "AVX-512, AVX2, FMA");
  EXPECT_EQ(cooperlake().describe(), "AVX-512 (BF16), AVX2, FMA");
}

// The in-process question a Python parent asks a child: set and restored
// here around the simulated core name.
TEST(BlasCore, WantedCoreTypeHonoursTheVariables) {
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  if (user != nullptr) GTEST_SKIP() << "OPENBLAS_CORETYPE is set for this test run";
  const std::string best = best_openblas_coretype(CpuFeatures::of_this_cpu());
  ::setenv("AUTOSHARD_SIMULATE_BLAS_CORE", "Prescott", 1);
  const auto wanted = wanted_openblas_coretype();
  if (blas_info().config.find("DYNAMIC_ARCH") != std::string::npos && !best.empty()) {
    EXPECT_EQ(wanted, best);
  }
  ::setenv("OPENBLAS_CORETYPE", "Prescott", 1);
  EXPECT_EQ(wanted_openblas_coretype(), std::nullopt);
  ::unsetenv("OPENBLAS_CORETYPE");
  ::setenv("AUTOSHARD_KEEP_BLAS_CORE", "1", 1);
  EXPECT_EQ(wanted_openblas_coretype(), std::nullopt);
  ::unsetenv("AUTOSHARD_KEEP_BLAS_CORE");
  ::unsetenv("AUTOSHARD_SIMULATE_BLAS_CORE");
}

// NumPy first in Python: the process's OpenBLAS runs kernels below the CPU
// (simulated) and autoshard's products move to a private copy of the library
// with the best ones, and give the same numbers as a plain loop.
TEST(BlasCore, APrivateCopyRunsTheBestKernelsForAutoshardsProducts) {
  const std::string best = best_openblas_coretype(CpuFeatures::of_this_cpu());
  if (blas_info().config.find("DYNAMIC_ARCH") == std::string::npos || best.empty())
    GTEST_SKIP() << "one core type only";
  const char* user = std::getenv("OPENBLAS_CORETYPE");
  const std::string users = user ? user : "";
  ::unsetenv("OPENBLAS_CORETYPE");  // as for a user who set nothing
  ::setenv("AUTOSHARD_SIMULATE_BLAS_CORE", "Prescott", 1);
  const std::string why_not = use_private_openblas();
  ::unsetenv("AUTOSHARD_SIMULATE_BLAS_CORE");
  if (user != nullptr) ::setenv("OPENBLAS_CORETYPE", users.c_str(), 1);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  EXPECT_NE(why_not.find("sanitizers"), std::string::npos) << why_not;
  GTEST_SKIP() << why_not;
#endif
  ASSERT_EQ(why_not, "");
  const BlasInfo info = blas_info();
  EXPECT_TRUE(info.private_copy);
  EXPECT_EQ(info.chosen_by, "autoshard");
  EXPECT_EQ(info.library_choice, "Prescott");
  EXPECT_EQ(info.core, best);
  EXPECT_NE(describe(info).find("autoshard runs a private copy"), std::string::npos);
  EXPECT_EQ(use_private_openblas(), "");  // once is enough
  // C = A^T B for A [k, m] and B [k, n], odd sizes, against the loop.
  const int m = 37, n = 29, k = 53;
  std::vector<float> a(size_t(k) * m), b(size_t(k) * n), c(size_t(m) * n, 1.0f);
  for (size_t i = 0; i < a.size(); ++i) a[i] = float(int(i % 13) - 6) / 7.0f;
  for (size_t i = 0; i < b.size(); ++i) b[i] = float(int(i % 11) - 5) / 3.0f;
  sgemm(true, false, m, n, k, 2.0f, a.data(), m, b.data(), n, 0.5f, c.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double want = 0.5;
      for (int p = 0; p < k; ++p) want += 2.0 * a[size_t(p) * m + i] * b[size_t(p) * n + j];
      ASSERT_NEAR(c[size_t(i) * n + j], want, 1e-3) << i << ", " << j;
    }
}

struct Result {
  int code = -1;
  std::string output;
};

Result run_cli(const std::string& env, const std::string& args) {
  const std::string cmd =
      "env -u OPENBLAS_CORETYPE -u AUTOSHARD_OPENBLAS_OWN_CORE -u AUTOSHARD_KEEP_BLAS_CORE " + env +
      " timeout 60 " + std::string(AUTOSHARD_CLI) + " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Result r;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(BlasCoreCli, VersionReportsTheKernels) {
  const Result r = run_cli("", "--version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("autoshard "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("BLAS: OpenBLAS "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(", core "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sgemm peak: "), std::string::npos) << r.output;
}

// OpenBLAS "chose" Prescott (the hook): the CLI restarts itself with the best
// core type for this CPU, and says so.
TEST(BlasCoreCli, RestartsWithTheBestKernels) {
  const std::string best = best_openblas_coretype(CpuFeatures::of_this_cpu());
  const Result r = run_cli("AUTOSHARD_SIMULATE_BLAS_CORE=Prescott", "--version");
  EXPECT_EQ(r.code, 0) << r.output;
  if (best.empty())
    EXPECT_NE(r.output.find("core Prescott (chosen by OpenBLAS;"), std::string::npos) << r.output;
  else
    EXPECT_NE(r.output.find("core " + best + " (set by autoshard, OpenBLAS chose Prescott;"),
              std::string::npos)
        << r.output;
}

TEST(BlasCoreCli, TheUsersCoreTypeIsKept) {
  const std::string best = best_openblas_coretype(CpuFeatures::of_this_cpu());
  const std::string below = best.empty() ? "" : ", below this CPU's " + best;
  Result r =
      run_cli("OPENBLAS_CORETYPE=Prescott AUTOSHARD_SIMULATE_BLAS_CORE=Prescott", "--version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("core Prescott (chosen by OPENBLAS_CORETYPE" + below + ";"),
            std::string::npos)
      << r.output;
  // The line names the fix when the user's choice is below the CPU.
  if (!best.empty()) {
    EXPECT_NE(r.output.find("for the faster kernels unset OPENBLAS_CORETYPE or set it to " + best),
              std::string::npos)
        << r.output;
  }
  // AUTOSHARD_KEEP_BLAS_CORE=1: the library as shipped.
  r = run_cli("AUTOSHARD_KEEP_BLAS_CORE=1 AUTOSHARD_SIMULATE_BLAS_CORE=Prescott", "--version");
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("core Prescott (chosen by OpenBLAS" + below + ";"), std::string::npos)
      << r.output;
  if (!best.empty()) {
    EXPECT_NE(r.output.find("for the faster kernels unset AUTOSHARD_KEEP_BLAS_CORE"),
              std::string::npos)
        << r.output;
  }
}

TEST(BlasCoreCli, KeepTakesOnlyOne) {
  const Result r = run_cli("AUTOSHARD_KEEP_BLAS_CORE=yes", "--version");
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_EQ(r.output.rfind("autoshard: error: AUTOSHARD_KEEP_BLAS_CORE is 'yes'", 0), 0u)
      << r.output;
  EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << r.output;
}

}  // namespace
}  // namespace autoshard::blas
