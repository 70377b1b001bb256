// commands.h: each `cutrain` subcommand adds itself to the CLI11 app through one function.
// A command's callback leaves its exit status in `exit_code`; errors are thrown as exceptions
// and main() prints them as one line.
#pragma once

#include <CLI/CLI.hpp>

namespace cutrain {

void add_info_command(CLI::App& app, int& exit_code);
void add_make_synthetic_command(CLI::App& app, int& exit_code);
void add_inspect_data_command(CLI::App& app, int& exit_code);
void add_show_sampler_command(CLI::App& app, int& exit_code);
void add_bench_data_command(CLI::App& app, int& exit_code);

}  // namespace cutrain
