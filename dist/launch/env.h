// env.h: who am I in the job? Read from the environment, in torchrun's terms:
//   RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, MASTER_ADDR,
//   MASTER_PORT, which cutrun (or torchrun) sets,
// plus CUTRAIN_RUN_ID, the launcher's id for this run (keeps two runs on one port apart),
// CUTRAIN_STORE_BIND, where rank 0's store listens when not at MASTER_ADDR, and
// CUTRAIN_RDZV_TIMEOUT, the seconds the rendezvous may take (cutrun --rdzv-timeout), and torchrun's
// TORCHELASTIC_RESTART_COUNT, how often the launcher has restarted this node's ranks (0 at the first start),
// and TORCHELASTIC_USE_AGENT_STORE, "True" where torchrun's agent serves the store at MASTER_ADDR:MASTER_PORT
// (Note [torchrun's store] in dist/launch/torch_store.h).
// With none of them set, the process is a world of one. `--local_rank N` on the command line
// (torch.distributed.launch's old way) overrides LOCAL_RANK.
//
// Under `srun` without a launcher: when neither RANK nor WORLD_SIZE is set and SLURM_PROCID is,
// the task takes its place from Slurm's variables instead:
//   RANK <- SLURM_PROCID, WORLD_SIZE <- SLURM_STEP_NUM_TASKS (or SLURM_NTASKS),
//   LOCAL_RANK <- SLURM_LOCALID,
//   GROUP_RANK <- SLURM_NODEID, GROUP_WORLD_SIZE <- SLURM_STEP_NUM_NODES (or SLURM_NNODES),
//   LOCAL_WORLD_SIZE <- this node's entry of SLURM_STEP_TASKS_PER_NODE (or SLURM_TASKS_PER_NODE),
//   MASTER_ADDR <- the first host of SLURM_STEP_NODELIST (or SLURM_JOB_NODELIST): where task 0
//                  runs (srun's block and cyclic distributions), never the node srun was typed on,
//   MASTER_PORT <- 10000 + SLURM_JOB_ID mod 20000, CUTRAIN_RUN_ID <- slurm-<job id>.<step id>.
// MASTER_ADDR, MASTER_PORT and CUTRAIN_RUN_ID, when set, still win over what Slurm implies.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace cutrain {

struct DistEnv {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int group_rank = 0;        // this node
  int group_world_size = 1;  // the number of nodes
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string run_id = "default";
  std::string store_bind;  // empty: MASTER_ADDR
  std::chrono::milliseconds rdzv_timeout = std::chrono::minutes(5);
  int restart_count = 0;         // Note [A newer group ends an older one] in dist/launch/store_state.h
  bool use_agent_store = false;  // join torchrun's agent's TCPStore instead of serving one at rank 0
  bool from_slurm = false;       // the place came from SLURM_PROCID and its kin

  bool is_distributed() const { return world_size > 1; }
  bool is_main() const { return rank == 0; }
};

// Note [The largest world]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A job has at most kMaxWorldSize processes, and the environment, cutrun's flags and a checkpoint's
// metadata are all refused above it in one line. The bound comes from what the store carries in one
// message, which is at most kMaxFrameBytes (1 MiB, dist/launch/store_protocol.h) for cutrain's store and for
// TorchStore alike. Two messages grow with the world:
//   - the rendezvous' wait names every rank's key: about 26 bytes a rank, or 44 under torchrun's key
//     prefix, so 180 KB at 4,096 ranks;
//   - Gloo's full mesh has each rank publish one address per peer in one value: 136 bytes a peer, so
//     557 KB at 4,096 ranks, and over the limit from about 7,700 ranks on.
// 4,096 leaves each at least half of the limit. It is also far above what the job can use: CIFAR-10's
// 50,000 training images give each of 4,096 ranks about 12 images an epoch. Rank 0 holds one store
// connection per rank, and on the CPU every rank holds one Gloo connection per peer, so the processes
// need `ulimit -n` above the world size; the rendezvous raises the soft limit as far as the hard one
// allows (make_room_for_connections in dist/launch/rendezvous.cpp).
inline constexpr int kMaxWorldSize = 4096;

// Environment variables by name; an unset variable is absent.
using Variables = std::map<std::string, std::string>;

// Throws std::runtime_error with one line naming the bad variable (not a number, rank outside
// the world, a malformed Slurm node list, ...).
DistEnv dist_env_from(const Variables& variables);

// dist_env_from() of this process's environment.
DistEnv dist_env_from_environment(std::optional<int> local_rank_flag = std::nullopt);

}  // namespace cutrain
