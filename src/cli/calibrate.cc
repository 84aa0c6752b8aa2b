// `autoshard calibrate [--out FILE]`: measures this machine for the cost
// model's "cpu" cluster (see plan/calibration.h) and writes it where the
// "cpu" preset reads it, or to FILE. The MPI collectives are measured too
// when mpirun is installed (two ranks).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "autoshard/comm/world.h"
#include "autoshard/error.h"
#include "autoshard/ir/blas_core.h"
#include "autoshard/plan/calibration.h"
#include "cli/commands.h"
#include "cli/output_file.h"

namespace autoshard::cli {

namespace {

struct CalibrateArgs {
  std::string out;
  bool quick = false;
  bool mpi = true;
  bool overwrite = false;
};

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "autoshard";
}

// The MPI link measured by two ranks of this program, if mpirun is there.
std::optional<LinkLevel> measure_mpi(bool quick) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) return std::nullopt;
  const std::string tmp = (std::filesystem::temp_directory_path() /
                           ("autoshard-calibrate-mpi-" + std::to_string(::getpid()) + ".json"))
                              .string();
  const std::string cmd =
      "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 2 "
      "--oversubscribe '" +
      self_path() + "' calibrate --no-mpi --out '" + tmp + "'" + (quick ? " --quick" : "") +
      " > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  std::optional<LinkLevel> link;
  if (status == 0 && std::filesystem::exists(tmp)) {
    std::ifstream in(tmp);
    std::stringstream text;
    text << in.rdbuf();
    link = Cluster::from_json(text.str(), tmp).mpi_link;
  }
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
  return link;
}

void run_calibrate(const CalibrateArgs& a) {
  const World& world = World::process();
  // --out is the user's file (output_file.h's rule, checked before
  // measuring); the "cpu" preset's own file is refreshed in place.
  const std::string out = a.out.empty() ? Cluster::calibration_path() : a.out;
  const bool overwrite = a.overwrite || a.out.empty();
  if (world.leader()) {
    const std::filesystem::path parent = std::filesystem::path(out).parent_path();
    if (a.out.empty() && !parent.empty()) std::filesystem::create_directories(parent);
    check_output_path(out, "--out", overwrite);
  }
  Calibration cal = calibrate({a.quick});
  if (world.distributed()) {
    // Rank 0 writes the MPI link into a cluster file of its own.
    if (!world.leader()) return;
    Cluster c = Cluster::preset("a100-80g");  // any complete cluster to carry the link
    c.mpi_link = cal.cluster.mpi_link;
    write_output_file(out, "--out", c.to_json() + "\n", overwrite);
    return;
  }
  if (a.mpi) cal.cluster.mpi_link = measure_mpi(a.quick);
  nlohmann::json j = nlohmann::json::parse(cal.cluster.to_json());
  j["measurements"] = cal.measurements;
  // Which kernels the GEMM figures were measured with.
  const std::string blas = blas::describe(blas::blas_info());
  j["measurements"]["blas"] = blas;
  write_output_file(out, "--out", j.dump(2) + "\n", overwrite);
  const Cluster& c = cal.cluster;
  std::printf("calibrated this machine (%d cores) into %s\n", c.shared_cores, out.c_str());
  std::printf("  BLAS             %s\n", blas.c_str());
  std::printf("  GEMM peak        %.1f GFLOP/s per core (%.1f all cores)\n",
              c.flops_f32 / c.shared_cores / 1e9, c.flops_f32 / 1e9);
  std::printf("  GEMM packing     %.2f GB/s per core (operands beyond a square's)\n",
              c.gemm_packing_bandwidth / 1e9);
  std::printf("  kernels          %.2f GB/s, %.2f GFLOP/s on one core\n", c.kernel_bandwidth / 1e9,
              c.kernel_flops / 1e9);
  std::printf("  memory           %.2f GB/s copy bandwidth, %.1f GiB\n", c.memory_bandwidth / 1e9,
              c.memory_bytes / (1 << 30));
  std::printf("  op overhead      %.2f us\n", c.op_overhead * 1e6);
  std::printf(
      "  threads          latency %.2f us, bandwidth %.2f GB/s; more devices than cores: "
      "%.0f us a call, %.0f%% of the cores, slice %.1f ms\n",
      c.links[0].latency * 1e6, c.links[0].bandwidth / 1e9, c.oversubscribed_wait * 1e6,
      c.oversubscribed_efficiency * 100, c.oversubscribed_slice * 1e3);
  if (c.mpi_link)
    std::printf(
        "  MPI              latency %.2f us, bandwidth %.2f GB/s (gradient buckets: %.2f us, %.2f "
        "GB/s)\n",
        c.mpi_link->latency * 1e6, c.mpi_link->bandwidth / 1e9, c.mpi_link->bucket_latency * 1e6,
        c.mpi_link->bucket_bandwidth / 1e9);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto a = std::make_shared<CalibrateArgs>();
  CLI::App* cmd = app.add_subcommand("calibrate",
                                     "measure this machine for the cost model (the 'cpu' cluster)");
  cmd->add_option("--out", a->out, "write to FILE instead of the 'cpu' preset's place");
  cmd->add_flag("--quick", a->quick, "fewer measurements (seconds)");
  cmd->add_flag("!--no-mpi", a->mpi, "skip measuring MPI collectives");
  add_overwrite(cmd, a->overwrite);
  cmd->callback([a] { run_calibrate(*a); });
}

}  // namespace autoshard::cli
