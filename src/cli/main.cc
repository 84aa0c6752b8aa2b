// autoshard: train and evaluate models on a mesh of devices.
#include <cstdio>

#include "autoshard/error.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"autoshard: automatic tensor parallelism for training and running neural networks"};
  app.require_subcommand(0, 1);
  autoshard::cli::add_train_command(app);
  autoshard::cli::add_eval_command(app);
  autoshard::cli::add_plan_command(app);
  autoshard::cli::add_convert_command(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {
      std::fputs(app.help().c_str(), stdout);
      return 0;
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const autoshard::Error& e) {
    std::fprintf(stderr, "autoshard: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "autoshard: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
