// The subcommands of the `autoshard` command line tool.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace autoshard::cli {

// A run stopped by SIGINT or SIGTERM after saving what it had: main reports
// it and exits with 128 + the signal, as shells do.
struct Interrupted {
  int signal;
  std::string message;
  Interrupted(int s, std::string m) : signal(s), message(std::move(m)) {}
};

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
