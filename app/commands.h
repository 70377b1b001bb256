// commands.h: each `cutrain` subcommand adds itself to the CLI11 app through one function, and
// add_commands adds them all (and the app's own flags). A command's callback leaves its exit
// status in `exit_code`; errors are thrown as exceptions and main() prints them as one line.
// Numeric flags and switches are declared through app/flags.h.
#pragma once

#include <CLI/CLI.hpp>

namespace cutrain {

// Every subcommand, --local_rank and --version: the whole `cutrain` command line. A usage error
// is one line starting "cutrain: error:", with "did you mean --epochs?" when an option or command
// is near a known one.
void add_commands(CLI::App& app, int& exit_code);

void add_info_command(CLI::App& app, int& exit_code);
void add_train_command(CLI::App& app, int& exit_code);
void add_eval_command(CLI::App& app, int& exit_code);
void add_bench_allreduce_command(CLI::App& app, int& exit_code);
void add_make_synthetic_command(CLI::App& app, int& exit_code);
void add_inspect_data_command(CLI::App& app, int& exit_code);
void add_inspect_command(CLI::App& app, int& exit_code);
void add_show_sampler_command(CLI::App& app, int& exit_code);
void add_bench_data_command(CLI::App& app, int& exit_code);
void add_bench_step_command(CLI::App& app, int& exit_code);

}  // namespace cutrain
