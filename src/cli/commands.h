// The subcommands of the `autoshard` command line tool.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace autoshard::cli {

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_solve_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_predict_command(CLI::App& app);   // a Keras model's predictions (predict.cc)
void add_evaluate_command(CLI::App& app);  // a Keras model's loss and metrics (evaluate.cc)
void add_report_command(CLI::App& app);    // training curves of train --log files (report.cc)

}  // namespace autoshard::cli
