#include "dist/launch/env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "dist/launch/slurm.h"

extern char** environ;

namespace cutrain {
namespace {

// The variables this file reads, with their values where set (and not empty).
class Reader {
 public:
  explicit Reader(const Variables& variables) : variables_(variables) {}

  bool has(const char* name) const { return text(name) != nullptr; }

  const std::string* text(const char* name) const {
    auto it = variables_.find(name);
    return it == variables_.end() || it->second.empty() ? nullptr : &it->second;
  }

  std::string string(const char* name, const std::string& fallback) const {
    const std::string* value = text(name);
    return value ? *value : fallback;
  }

  // The integer in the first of `names` that is set, or `fallback` when none is.
  int integer(std::initializer_list<const char*> names, int fallback) const {
    for (const char* name : names) {
      const std::string* value = text(name);
      if (value == nullptr) continue;
      // Digits alone: strtol would also take " 0" and "+0".
      int number = 0;
      const char* last = value->data() + value->size();
      const auto [end, error] = std::from_chars(value->data(), last, number);
      if (!std::isdigit(static_cast<unsigned char>(value->front())) || error != std::errc() || end != last ||
          number > 1'000'000)
        throw std::runtime_error(std::string("environment variable ") + name + "='" + *value +
                                 "' is not a non-negative integer");
      return number;
    }
    return fallback;
  }

  int integer(const char* name, int fallback) const { return integer({name}, fallback); }

  std::chrono::milliseconds seconds(const char* name, std::chrono::milliseconds fallback) const {
    const std::string* value = text(name);
    if (value == nullptr) return fallback;
    char* end = nullptr;
    double s = std::strtod(value->c_str(), &end);
    if (*end != '\0' || !(s > 0) || s > 1e7)
      throw std::runtime_error(std::string("environment variable ") + name + "='" + *value +
                               "' is not a number of seconds above 0");
    return std::chrono::milliseconds(std::llround(s * 1000));
  }

 private:
  const Variables& variables_;
};

// torchrun's variables, as cutrun sets them.
void read_torchrun(const Reader& vars, DistEnv& env) {
  env.world_size = vars.integer("WORLD_SIZE", 1);
  env.rank = vars.integer("RANK", 0);
  env.local_rank = vars.integer("LOCAL_RANK", 0);
  env.local_world_size = vars.integer("LOCAL_WORLD_SIZE", env.world_size);
  env.group_rank = vars.integer("GROUP_RANK", 0);
  const int per_node = std::max(1, env.local_world_size);
  env.group_world_size = vars.integer("GROUP_WORLD_SIZE", (env.world_size + per_node - 1) / per_node);
}

// A Slurm list variable expanded by `expand`, with errors naming the variable.
template <typename Expand>
auto expand_variable(const Reader& vars, std::initializer_list<const char*> names, Expand expand)
    -> decltype(expand(std::string())) {
  for (const char* name : names) {
    const std::string* value = vars.text(name);
    if (value == nullptr) continue;
    try {
      return expand(*value);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(std::string("environment variable ") + name + "='" + *value + "': " + e.what());
    }
  }
  return {};
}

// Slurm's variables, for a task that srun started itself.
void read_slurm(const Reader& vars, DistEnv& env) {
  env.from_slurm = true;
  if (!vars.has("SLURM_NTASKS") && !vars.has("SLURM_STEP_NUM_TASKS"))
    throw std::runtime_error(
        "SLURM_PROCID is set but SLURM_NTASKS is not: start cutrain with srun, or set RANK "
        "and WORLD_SIZE");
  env.rank = vars.integer("SLURM_PROCID", 0);
  env.world_size = vars.integer({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, 1);
  env.local_rank = vars.integer("SLURM_LOCALID", 0);
  env.group_rank = vars.integer("SLURM_NODEID", 0);
  env.group_world_size = vars.integer({"SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, 1);

  const std::vector<int> tasks =
      expand_variable(vars, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, expand_tasks_per_node);
  env.local_world_size = size_t(env.group_rank) < tasks.size() ? tasks[size_t(env.group_rank)]
                                                               : env.world_size / std::max(1, env.group_world_size);

  const std::vector<std::string> hosts =
      expand_variable(vars, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, expand_hostlist);
  if (!hosts.empty()) {
    env.master_addr = hosts.front();
  } else if (env.world_size > 1 && !vars.has("MASTER_ADDR")) {
    throw std::runtime_error(
        "SLURM_PROCID is set but no node list (SLURM_STEP_NODELIST or SLURM_JOB_NODELIST) "
        "names task 0's node: set MASTER_ADDR");
  }
  const std::string job = vars.string("SLURM_JOB_ID", "");
  if (!job.empty()) {
    uint64_t id = 0;
    auto [end, error] = std::from_chars(job.data(), job.data() + job.size(), id);
    if (error != std::errc() || end != job.data() + job.size())
      throw std::runtime_error("environment variable SLURM_JOB_ID='" + job + "' is not a job id");
    // Every task of the job computes the same port, away from the ephemeral range (32768 and up).
    env.master_port = 10000 + int(id % 20000);
    env.run_id = "slurm-" + job + "." + vars.string("SLURM_STEP_ID", vars.string("SLURM_STEPID", "0"));
  }
}

}  // namespace

DistEnv dist_env_from(const Variables& variables) {
  const Reader vars(variables);
  DistEnv env;
  const bool slurm = !vars.has("RANK") && !vars.has("WORLD_SIZE") && vars.has("SLURM_PROCID");
  if (slurm)
    read_slurm(vars, env);
  else
    read_torchrun(vars, env);
  env.master_addr = vars.string("MASTER_ADDR", env.master_addr);
  env.master_port = vars.integer("MASTER_PORT", env.master_port);
  env.run_id = vars.string("CUTRAIN_RUN_ID", env.run_id);
  env.store_bind = vars.string("CUTRAIN_STORE_BIND", "");
  env.rdzv_timeout = vars.seconds("CUTRAIN_RDZV_TIMEOUT", env.rdzv_timeout);
  env.restart_count = vars.integer("TORCHELASTIC_RESTART_COUNT", 0);
  // torchrun writes str(True) and its workers compare with it; "1" and "0" are read too.
  const std::string agent_store = vars.string("TORCHELASTIC_USE_AGENT_STORE", "False");
  if (agent_store != "True" && agent_store != "1" && agent_store != "False" && agent_store != "0")
    throw std::runtime_error("environment variable TORCHELASTIC_USE_AGENT_STORE='" + agent_store +
                             "' is neither True nor False");
  env.use_agent_store = agent_store == "True" || agent_store == "1";

  const char* source = slurm ? "SLURM_NTASKS" : "WORLD_SIZE";
  if (env.world_size < 1) throw std::runtime_error(std::string(source) + "=0: a job needs at least one process");
  if (env.world_size > kMaxWorldSize)  // Note [The largest world] in dist/launch/env.h
    throw std::runtime_error(std::string(source) + "=" + std::to_string(env.world_size) + ": a job has at most " +
                             std::to_string(kMaxWorldSize) + " processes");
  if (env.rank >= env.world_size)
    throw std::runtime_error(std::string(slurm ? "SLURM_PROCID=" : "RANK=") + std::to_string(env.rank) +
                             " is not below " + source + "=" + std::to_string(env.world_size));
  if (env.local_rank >= env.local_world_size)
    throw std::runtime_error(std::string(slurm ? "SLURM_LOCALID=" : "LOCAL_RANK=") + std::to_string(env.local_rank) +
                             " is not below " + (slurm ? "this node's task count, " : "LOCAL_WORLD_SIZE=") +
                             std::to_string(env.local_world_size));
  if (env.group_rank >= env.group_world_size)
    throw std::runtime_error(std::string(slurm ? "SLURM_NODEID=" : "GROUP_RANK=") + std::to_string(env.group_rank) +
                             " is not below the number of nodes, " + std::to_string(env.group_world_size));
  // Port 0 would let rank 0's store bind a port of the kernel's choosing, which no other rank can know, so that
  // they wait out the rendezvous; cutrun's --master-port refuses it the same way.
  if (env.master_port < 1 || env.master_port > 65535)
    throw std::runtime_error("MASTER_PORT=" + std::to_string(env.master_port) + " is not a port (1..65535)");
  return env;
}

DistEnv dist_env_from_environment(std::optional<int> local_rank_flag) {
  Variables variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text(*entry);
    const size_t equals = text.find('=');
    if (equals != std::string::npos) variables[text.substr(0, equals)] = text.substr(equals + 1);
  }
  if (local_rank_flag) variables["LOCAL_RANK"] = std::to_string(*local_rank_flag);
  return dist_env_from(variables);
}

}  // namespace cutrain
