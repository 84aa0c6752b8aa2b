// The subcommands of the `autoshard` command line tool.
#pragma once

#include <CLI/CLI.hpp>

namespace autoshard::cli {

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_convert_command(CLI::App& app);

}  // namespace autoshard::cli
