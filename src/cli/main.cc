// autoshard: train and evaluate models on a mesh of devices.
#include <cstdio>
#include <filesystem>
#include <string>

#include "autoshard/app/training_run.h"
#include "autoshard/comm/world.h"
#include "autoshard/environment.h"
#include "autoshard/error.h"
#include "autoshard/ir/blas_core.h"
#include "cli/agreement.h"
#include "cli/commands.h"

namespace {
// Under mpirun a failing rank takes every rank down, with a message naming
// it, instead of leaving the others waiting in a collective.
// The message is one line, whatever names it quotes (Error's are already).
int report(const char* kind, const char* what) {
  const std::string line = autoshard::one_line(what);
  autoshard::World::process().abort_all(std::string(kind) + line);
  std::fprintf(stderr, "autoshard: %s%s\n", kind, line.c_str());
  return kind[0] == 'e' ? 1 : 2;
}

// `autoshard --version`: the program, the BLAS it runs (which kernels, and
// who chose them) and the sgemm peak they reach here (a tenth of a second).
std::string version_text() {
  const autoshard::blas::BlasInfo blas = autoshard::blas::blas_info();
  const double peak = autoshard::blas::sgemm_peak_gflops();
  char line[128];
  std::snprintf(line, sizeof line, "sgemm peak: %.1f GFLOP/s (n = 1024, %d threads)", peak,
                blas.threads);
  return "autoshard 0.1.0\nBLAS: " + autoshard::blas::describe(blas) + "\n" + line;
}
}  // namespace

int main(int argc, char** argv) {
  // First, before any thread or MPI_Init: restart with OPENBLAS_CORETYPE set
  // when OpenBLAS chose kernels below this CPU's (ir/blas_core.h).
  try {
    autoshard::blas::use_best_blas_kernels(argv);
  } catch (const autoshard::Error& e) {
    return report("error: ", e.what());
  }
  CLI::App app{"autoshard: automatic tensor parallelism for training and running neural networks"};
  app.require_subcommand(0, 1);
  app.set_version_flag("--version", version_text, "print the version, the BLAS and its kernels");
  autoshard::cli::add_train_command(app);
  autoshard::cli::add_eval_command(app);
  autoshard::cli::add_evaluate_command(app);
  autoshard::cli::add_predict_command(app);
  autoshard::cli::add_generate_command(app);
  autoshard::cli::add_tokenize_command(app);
  autoshard::cli::add_plan_command(app);
  autoshard::cli::add_convert_command(app);
  autoshard::cli::add_solve_command(app);
  autoshard::cli::add_calibrate_command(app);
  autoshard::cli::add_report_command(app);
  autoshard::cli::require_agreement_across_ranks(app);  // under mpirun: same options on every rank
  try {
    // A bad AUTOSHARD_* variable stops every command before it starts.
    autoshard::env::check_all();
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // One format for every usage error: a line naming the problem, exit 1.
    const std::string what = std::string(e.what()) + " (see 'autoshard --help')";
    return report("error: ", what.c_str());
  } catch (const autoshard::Interrupted& e) {
    if (autoshard::World::process().leader())
      std::fprintf(stderr, "autoshard: %s\n", e.message.c_str());
    autoshard::World::process().finalize();
    return 128 + e.signal;
  } catch (const std::filesystem::filesystem_error& e) {
    return report("error: ", e.what());
  } catch (const autoshard::Error& e) {
    return report("error: ", e.what());
  } catch (const std::exception& e) {
    return report("internal error: ", e.what());
  }
  autoshard::World::process().finalize();
  return 0;
}
