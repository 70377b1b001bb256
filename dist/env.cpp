#include "dist/env.h"

#include <cstdlib>
#include <stdexcept>

namespace cutrain {
namespace {

// The integer in environment variable `name`, or `fallback` when it is unset.
int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1'000'000)
    throw std::runtime_error(std::string("environment variable ") + name + "='" + text +
                             "' is not a non-negative integer");
  return int(value);
}

std::string env_string(const char* name, const std::string& fallback) {
  const char* text = std::getenv(name);
  return (text == nullptr || *text == '\0') ? fallback : std::string(text);
}

}  // namespace

DistEnv dist_env_from_environment(std::optional<int> local_rank_flag) {
  DistEnv env;
  env.world_size = env_int("WORLD_SIZE", 1);
  env.rank = env_int("RANK", 0);
  env.local_rank = local_rank_flag.value_or(env_int("LOCAL_RANK", 0));
  env.local_world_size = env_int("LOCAL_WORLD_SIZE", env.world_size);
  env.group_rank = env_int("GROUP_RANK", 0);
  env.master_addr = env_string("MASTER_ADDR", env.master_addr);
  env.master_port = env_int("MASTER_PORT", env.master_port);
  env.run_id = env_string("CUTRAIN_RUN_ID", env.run_id);
  env.store_bind = env_string("CUTRAIN_STORE_BIND", "");

  if (env.world_size < 1) throw std::runtime_error("WORLD_SIZE=0: a job needs at least one process");
  if (env.rank >= env.world_size)
    throw std::runtime_error("RANK=" + std::to_string(env.rank) +
                             " is not below WORLD_SIZE=" + std::to_string(env.world_size));
  if (env.local_rank >= env.local_world_size)
    throw std::runtime_error("LOCAL_RANK=" + std::to_string(env.local_rank) +
                             " is not below LOCAL_WORLD_SIZE=" + std::to_string(env.local_world_size));
  if (env.master_port > 65535)
    throw std::runtime_error("MASTER_PORT=" + std::to_string(env.master_port) + " is not a port");
  return env;
}

}  // namespace cutrain
