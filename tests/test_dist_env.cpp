// Who am I in the job: torchrun's variables, Slurm's (a task srun started without a launcher),
// which win when both are there, Slurm's compressed host lists, and the one-line refusals.
#include <catch2/catch.hpp>

#include "app/run_start.h"
#include "dist/launch/env.h"
#include "dist/launch/slurm.h"

using cutrain::dist_env_from;
using cutrain::DistEnv;
using cutrain::Variables;
using Hosts = std::vector<std::string>;

namespace {

// Task 5 of 8 on the second of two nodes, as srun --nodes 2 --ntasks-per-node 4 describes it.
Variables slurm_task() {
  return {{"SLURM_PROCID", "5"},          {"SLURM_NTASKS", "8"},
          {"SLURM_LOCALID", "1"},         {"SLURM_NODEID", "1"},
          {"SLURM_NNODES", "2"},          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_JOB_ID", "12345678"},     {"SLURM_STEP_ID", "3"},
          {"SLURM_STEP_TASKS_PER_NODE", "4(x2)"},
          {"SLURM_STEP_NODELIST", "gpu[07-08]"}, {"SLURM_JOB_NODELIST", "gpu[01-08],login2"}};
}

Variables with(Variables variables, const Variables& more) {
  for (const auto& [name, value] : more) variables[name] = value;
  return variables;
}

}  // namespace

TEST_CASE("Slurm host lists expand as scontrol show hostnames does", "[dist]") {
  using cutrain::expand_hostlist;
  CHECK(expand_hostlist("login2") == Hosts{"login2"});
  CHECK(expand_hostlist("gpu[01-04,07],login2") == Hosts{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login2"});
  CHECK(expand_hostlist("n[8-11]") == Hosts{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Hosts{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("a[1-2]-b[1,3],c") == Hosts{"a1-b1", "a1-b3", "a2-b1", "a2-b3", "c"});
  CHECK(expand_hostlist("node-1.cluster,node-2.cluster") == Hosts{"node-1.cluster", "node-2.cluster"});
  CHECK(expand_hostlist("x[5]") == Hosts{"x5"});
}

TEST_CASE("a malformed Slurm host list is one line naming what is wrong", "[dist]") {
  using cutrain::expand_hostlist;
  CHECK_THROWS_WITH(expand_hostlist("gpu[01-04"), "a '[' without its ']'");
  CHECK_THROWS_WITH(expand_hostlist("gpu01-04]"), "brackets out of place");
  CHECK_THROWS_WITH(expand_hostlist("gpu[[1]]"), "brackets out of place");
  CHECK_THROWS_WITH(expand_hostlist("gpu[4-1]"), "the range 4-1 runs backwards");
  CHECK_THROWS_WITH(expand_hostlist("gpu[a-b]"), "range start 'a' is not a number");
  CHECK_THROWS_WITH(expand_hostlist("gpu1,,gpu2"), "an empty host name");
  CHECK_THROWS_WITH(expand_hostlist(""), "an empty host name");
}

TEST_CASE("Slurm's tasks per node expand to one count per node", "[dist]") {
  using cutrain::expand_tasks_per_node;
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK_THROWS_WITH(expand_tasks_per_node("2(x3"), "'2(x3' is not N or N(xK)");
}

TEST_CASE("a task started by srun takes its place from Slurm's variables", "[dist]") {
  const DistEnv env = dist_env_from(slurm_task());
  CHECK(env.from_slurm);
  CHECK(env.rank == 5);
  CHECK(env.world_size == 8);
  CHECK(env.local_rank == 1);
  CHECK(env.local_world_size == 4);
  CHECK(env.group_rank == 1);
  CHECK(env.group_world_size == 2);
  CHECK(env.master_addr == "gpu07");  // the step's first node, not the job's nor the login node
  CHECK(env.master_port == 15678);  // 10000 + 12345678 mod 20000: job ids go past a million
  CHECK(env.run_id == "slurm-12345678.3");

  // Without a step node list (older Slurm), the job's; without a step task list, the job's.
  Variables job_only = slurm_task();
  job_only.erase("SLURM_STEP_NODELIST");
  job_only.erase("SLURM_STEP_TASKS_PER_NODE");
  job_only["SLURM_TASKS_PER_NODE"] = "6,2";
  const DistEnv from_job = dist_env_from(job_only);
  CHECK(from_job.master_addr == "gpu01");
  CHECK(from_job.local_world_size == 2);
}

TEST_CASE("torchrun's variables win over Slurm's", "[dist]") {
  // cutrun under srun gives its ranks RANK and WORLD_SIZE: those, not SLURM_PROCID, place them.
  const DistEnv env = dist_env_from(with(slurm_task(), {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "0"},
                                                        {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "1"},
                                                        {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}));
  CHECK(!env.from_slurm);
  CHECK(env.rank == 2);
  CHECK(env.world_size == 4);
  CHECK(env.group_world_size == 2);  // GROUP_WORLD_SIZE unset: WORLD_SIZE / LOCAL_WORLD_SIZE
  CHECK(env.master_addr == "10.0.0.1");
  CHECK(env.master_port == 29500);

  // Under Slurm, MASTER_ADDR, MASTER_PORT and CUTRAIN_RUN_ID set by hand still win.
  const DistEnv chosen = dist_env_from(
      with(slurm_task(), {{"MASTER_ADDR", "gpu08"}, {"MASTER_PORT", "4000"}, {"CUTRAIN_RUN_ID", "mine"}}));
  CHECK(chosen.from_slurm);
  CHECK(chosen.master_addr == "gpu08");
  CHECK(chosen.master_port == 4000);
  CHECK(chosen.run_id == "mine");
}

TEST_CASE("TORCHELASTIC_USE_AGENT_STORE=True, which torchrun 2.x sets, joins the agent's store", "[dist]") {
  const Variables torchrun = {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "36095"},
                              {"TORCHELASTIC_RESTART_COUNT", "3"}};
  CHECK(!dist_env_from(torchrun).use_agent_store);
  for (const char* yes : {"True", "1"}) CHECK(dist_env_from(with(torchrun, {{"TORCHELASTIC_USE_AGENT_STORE", yes}})).use_agent_store);
  for (const char* no : {"False", "0", ""}) CHECK(!dist_env_from(with(torchrun, {{"TORCHELASTIC_USE_AGENT_STORE", no}})).use_agent_store);
  CHECK(dist_env_from(torchrun).restart_count == 3);
  CHECK_THROWS_WITH(dist_env_from(with(torchrun, {{"TORCHELASTIC_USE_AGENT_STORE", "yes"}})),
                    "environment variable TORCHELASTIC_USE_AGENT_STORE='yes' is neither True nor False");
}

TEST_CASE("no launcher and no Slurm: a world of one", "[dist]") {
  const DistEnv env = dist_env_from({{"SLURM_JOB_ID", "7"}, {"SLURM_NNODES", "2"}});  // salloc's shell: no task
  CHECK(!env.from_slurm);
  CHECK(env.world_size == 1);
  CHECK(env.master_addr == "127.0.0.1");
  CHECK(env.rdzv_timeout == std::chrono::minutes(5));
  CHECK(dist_env_from({{"CUTRAIN_RDZV_TIMEOUT", "2.5"}}).rdzv_timeout == std::chrono::milliseconds(2500));
}

TEST_CASE("bad job variables are one line naming the variable", "[dist]") {
  CHECK_THROWS_WITH(dist_env_from(with(slurm_task(), {{"SLURM_STEP_NODELIST", "gpu[07-"}})),
                    "environment variable SLURM_STEP_NODELIST='gpu[07-': a '[' without its ']'");
  CHECK_THROWS_WITH(dist_env_from(with(slurm_task(), {{"SLURM_PROCID", "8"}})),
                    "SLURM_PROCID=8 is not below SLURM_NTASKS=8");
  Variables no_list = slurm_task();
  no_list.erase("SLURM_STEP_NODELIST");
  no_list.erase("SLURM_JOB_NODELIST");
  CHECK_THROWS_WITH(dist_env_from(no_list), Catch::StartsWith("SLURM_PROCID is set but no node list"));
  CHECK_THROWS_WITH(dist_env_from({{"SLURM_PROCID", "0"}}),
                    Catch::StartsWith("SLURM_PROCID is set but SLURM_NTASKS is not"));
  CHECK_THROWS_WITH(dist_env_from({{"CUTRAIN_RDZV_TIMEOUT", "soon"}}),
                    "environment variable CUTRAIN_RDZV_TIMEOUT='soon' is not a number of seconds above 0");
  CHECK_THROWS_WITH(dist_env_from({{"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}, {"GROUP_RANK", "2"}}),
                    "GROUP_RANK=2 is not below the number of nodes, 2");
  // Note [The largest world] in dist/launch/env.h.
  CHECK(dist_env_from({{"RANK", "4095"}, {"WORLD_SIZE", "4096"}}).world_size == cutrain::kMaxWorldSize);
  CHECK_THROWS_WITH(dist_env_from({{"WORLD_SIZE", "4097"}}), "WORLD_SIZE=4097: a job has at most 4096 processes");
  CHECK_THROWS_WITH(dist_env_from(with(slurm_task(), {{"SLURM_NTASKS", "1000000"}})),
                    "SLURM_NTASKS=1000000: a job has at most 4096 processes");
  CHECK_THROWS_WITH(dist_env_from({{"MASTER_PORT", "0"}}), "MASTER_PORT=0 is not a port (1..65535)");
  CHECK_THROWS_WITH(dist_env_from({{"MASTER_PORT", "65536"}}), "MASTER_PORT=65536 is not a port (1..65535)");
  // Before, strtol took a leading space or sign.
  for (const char* rank : {" 0", "+0", "0 ", "-0"})
    CHECK_THROWS_WITH(dist_env_from({{"RANK", rank}, {"WORLD_SIZE", "2"}}),
                      std::string("environment variable RANK='") + rank + "' is not a non-negative integer");
}

TEST_CASE("a rank's GPU: LOCAL_RANK, or the one Slurm gave the task", "[dist]") {
  using cutrain::cuda_device_for_rank;
  DistEnv env = dist_env_from({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "3"}, {"LOCAL_WORLD_SIZE", "4"}});
  CHECK(cuda_device_for_rank(env, 4) == 3);
  CHECK_THROWS_WITH(cuda_device_for_rank(env, 1), "LOCAL_RANK=3 but this machine has 1 CUDA device(s)");
  DistEnv task = dist_env_from(slurm_task());  // local rank 1 of 4 on its node
  CHECK(cuda_device_for_rank(task, 4) == 1);    // --gres=gpu:4: every task sees all four
  CHECK(cuda_device_for_rank(task, 1) == 0);    // --gpus-per-task=1: its own, as device 0
}
