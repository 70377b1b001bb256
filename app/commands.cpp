#include "app/commands.h"

#include <cstdlib>
#include <string>

#include "app/flags.h"

namespace cutrain {

void add_commands(CLI::App& app, int& exit_code) {
  app.require_subcommand(1);
  // Subcommands inherit this: an option they do not know (--local_rank) goes to the app.
  app.fallthrough();
  add_info_command(app, exit_code);
  add_train_command(app, exit_code);
  add_eval_command(app, exit_code);
  add_bench_allreduce_command(app, exit_code);
  add_make_synthetic_command(app, exit_code);
  add_inspect_data_command(app, exit_code);
  add_show_sampler_command(app, exit_code);
  add_bench_data_command(app, exit_code);
  add_bench_step_command(app, exit_code);
  // torch.distributed.launch's way of telling a worker its GPU: `cutrain --local_rank=N train ...`
  // (or `cutrain train --local_rank=N ...`) means LOCAL_RANK=N, which dist_env_from_environment()
  // reads.
  static int local_rank = 0;
  add_number(&app, "--local_rank", local_rank, "this process's GPU on its node (as LOCAL_RANK; set by launchers)", 0,
             1 << 16)
      ->each([](const std::string& rank) { setenv("LOCAL_RANK", rank.c_str(), 1); })
      ->trigger_on_parse();
}

}  // namespace cutrain
