// `cutrain show-sampler`: the indices one rank visits in one epoch, on one line, to diff against
//   python -c "import torch.utils.data as d; s = d.DistributedSampler(range(N), W, R, seed=S);
//              s.set_epoch(E); print(*s)"
#include <cstdio>

#include "app/commands.h"
#include "data/sampler.h"

namespace cutrain {

void add_show_sampler_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("show-sampler", "Print the sample indices a rank sees in an epoch (torch's DistributedSampler)");
  struct Options {
    int64_t dataset_size = 0;
    int world_size = 1, rank = 0;
    int64_t epoch = 0;
    uint64_t seed = 0;
    bool drop_last = false, no_shuffle = false;
  };
  auto o = std::make_shared<Options>();
  cmd->add_option("--dataset-size", o->dataset_size, "Samples in the dataset")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--world-size", o->world_size, "Number of ranks")->required()->check(CLI::PositiveNumber);
  cmd->add_option("--rank", o->rank, "This rank")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--epoch", o->epoch, "Epoch (set_epoch)")->required()->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->seed, "Shuffle seed")->capture_default_str();
  cmd->add_flag("--drop-last", o->drop_last, "Drop the tail instead of padding");
  cmd->add_flag("--no-shuffle", o->no_shuffle, "Keep the dataset order");
  cmd->callback([o, &exit_code] {
    if (o->rank >= o->world_size)
      throw std::invalid_argument("--rank: " + std::to_string(o->rank) + " is not below --world-size " +
                                  std::to_string(o->world_size));
    DistributedSampler sampler(o->dataset_size, o->world_size, o->rank, !o->no_shuffle, o->seed, o->drop_last);
    sampler.set_epoch(o->epoch);
    std::string line;
    for (int64_t i : sampler.indices()) line += (line.empty() ? "" : " ") + std::to_string(i);
    std::printf("%s\n", line.c_str());
    exit_code = 0;
  });
}

}  // namespace cutrain
