// `cutrain show-sampler`: the indices one rank visits in one epoch, on one line, to diff against
//   python -c "import torch.utils.data as d; s = d.DistributedSampler(range(N), W, R, seed=S);
//              s.set_epoch(E); print(*s)"
#include <cstdio>

#include "app/commands.h"
#include "app/flags.h"
#include "data/sampler.h"

namespace cutrain {

void add_show_sampler_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand("show-sampler",
                                 "Print the sample indices a rank sees in an epoch (torch's DistributedSampler)");
  struct Options {
    int64_t dataset_size = 0;
    int world_size = 1, rank = 0;
    int64_t epoch = 0;
    uint64_t seed = 0;
    bool drop_last = false, no_shuffle = false;
  };
  auto o = std::make_shared<Options>();
  add_number(cmd, "--dataset-size", o->dataset_size, "Samples in the dataset", 1, int64_t(1) << 40)->required();
  add_number(cmd, "--world-size", o->world_size, "Number of ranks", 1, 1 << 20)->required();
  add_number(cmd, "--rank", o->rank, "This rank (below --world-size)", 0, 1 << 20)->required();
  add_number(cmd, "--epoch", o->epoch, "Epoch (set_epoch)", 0, int64_t(1) << 40)->required();
  add_number(cmd, "--seed", o->seed, "Shuffle seed", 0, UINT64_MAX)->capture_default_str();
  add_switch(cmd, "--drop-last", o->drop_last, "Drop the tail instead of padding");
  add_switch(cmd, "--no-shuffle", o->no_shuffle, "Keep the dataset order");
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
