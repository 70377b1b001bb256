// cutrain: one binary, one subcommand per job. `cutrain --help` lists them.
#include <cstdio>
#include <exception>

#include "app/commands.h"
#include "app/run_end.h"

int main(int argc, char** argv) {
  CLI::App app{"cutrain: data-parallel ResNet-18 training on CIFAR-10, in C++ and CUDA"};
  int exit_code = 0;
  cutrain::add_commands(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit with 0; a usage error is one line (add_commands) and status 2, as
    // in argparse.
    constexpr int kUsageError = 2;
    return app.exit(e) == 0 ? 0 : kUsageError;
  } catch (const std::exception& e) {
    cutrain::write_error_file(e.what());
    std::fprintf(stderr, "cutrain: error: %s\n", e.what());
    return 1;
  }
  return exit_code;
}
