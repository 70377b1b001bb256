// env.h: who am I in the job? Read from torchrun's environment variables, which cutrun sets:
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT
// plus CUTRAIN_RUN_ID, the launcher's id for this run (keeps two runs on one port apart), and
// CUTRAIN_STORE_BIND, where rank 0's store listens when not at MASTER_ADDR.
// With none of them set, the process is a world of one. `--local_rank N` on the command line
// (torch.distributed.launch's old way) overrides LOCAL_RANK.
#pragma once

#include <optional>
#include <string>

namespace cutrain {

struct DistEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "default";
  std::string store_bind;  // empty: MASTER_ADDR

  bool is_distributed() const { return world_size > 1; }
  bool is_main() const { return rank == 0; }
};

// Throws std::runtime_error with one line naming the bad variable (not a number, rank outside
// the world, ...).
DistEnv dist_env_from_environment(std::optional<int> local_rank_flag = std::nullopt);

}  // namespace cutrain
