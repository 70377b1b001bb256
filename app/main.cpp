// cutrain: one binary, one subcommand per job. `cutrain --help` lists them.
#include <cstdio>
#include <exception>

#include "app/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"cutrain: data-parallel ResNet-18 training on CIFAR-10, in C++ and CUDA"};
  app.require_subcommand(1);
  int exit_code = 0;
  cutrain::add_info_command(app, exit_code);
  cutrain::add_make_synthetic_command(app, exit_code);
  cutrain::add_inspect_data_command(app, exit_code);
  cutrain::add_show_sampler_command(app, exit_code);
  cutrain::add_bench_data_command(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cutrain: error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
