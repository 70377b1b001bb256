// cutrain: one binary, one subcommand per job. `cutrain --help` lists them.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <exception>

#include "app/commands.h"

int main(int argc, char** argv) {
  CLI::App app{"cutrain: data-parallel ResNet-18 training on CIFAR-10, in C++ and CUDA"};
  app.require_subcommand(1);
  // Subcommands inherit this: an option they do not know (--local_rank) goes to the app.
  app.fallthrough();
  int exit_code = 0;
  cutrain::add_info_command(app, exit_code);
  cutrain::add_train_command(app, exit_code);
  cutrain::add_eval_command(app, exit_code);
  cutrain::add_bench_allreduce_command(app, exit_code);
  cutrain::add_make_synthetic_command(app, exit_code);
  cutrain::add_inspect_data_command(app, exit_code);
  cutrain::add_show_sampler_command(app, exit_code);
  cutrain::add_bench_data_command(app, exit_code);
  cutrain::add_bench_step_command(app, exit_code);
  // torch.distributed.launch's way of telling a worker its GPU: `cutrain --local_rank=N train ...`
  // (or `cutrain train --local_rank=N ...`) means LOCAL_RANK=N, which dist_env_from_environment()
  // reads.
  app.add_option_function<int>("--local_rank", [](int r) { setenv("LOCAL_RANK", std::to_string(r).c_str(), 1); },
                               "this process's GPU on its node (as LOCAL_RANK; set by launchers)")
      ->trigger_on_parse();
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
