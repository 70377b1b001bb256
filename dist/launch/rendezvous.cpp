#include "dist/launch/rendezvous.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <stdexcept>

#include <sys/resource.h>
#include <unistd.h>

#include "dist/launch/socket.h"
#include "dist/launch/torch_store.h"

namespace cutrain {
namespace {

constexpr auto kReportEvery = std::chrono::milliseconds(15'000);
const std::string kRankKey = "rendezvous/rank/";
const std::string kNodeKey = "rendezvous/node/";

using std::chrono::milliseconds;

// The one line that ends a rendezvous, as opposed to a store that went away under it.
struct RendezvousFailed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The deadline, and when the next waiting line is due.
class Progress {
 public:
  Progress(milliseconds timeout, RendezvousReport report)
      : deadline_(Clock::now() + timeout),
        every_(std::min(kReportEvery, timeout / 4)),
        next_(Clock::now() + every_),
        report_(std::move(report)) {}

  bool due() const { return Clock::now() >= next_; }
  bool expired() const { return Clock::now() >= deadline_; }

  // How long to wait before the next line is due or the time is up.
  milliseconds until_next() const {
    return std::max(milliseconds(0), std::chrono::ceil<milliseconds>(std::min(next_, deadline_) - Clock::now()));
  }

  void say(const std::string& what) {
    const auto left = std::chrono::ceil<std::chrono::seconds>(deadline_ - Clock::now());
    report_("rendezvous: " + what + "; giving up in " + describe(left));
    next_ = Clock::now() + every_;
  }

 private:
  Clock::time_point deadline_;
  milliseconds every_;
  Clock::time_point next_;
  RendezvousReport report_;
};

RendezvousReport stderr_report(const DistEnv& env) {
  if (env.local_rank != 0) return [](const std::string&) {};  // one voice per node
  return [](const std::string& line) {
    std::fprintf(stderr, "cutrain: %s\n", line.c_str());
    std::fflush(stderr);
  };
}

std::vector<std::string> numbered_keys(const std::string& prefix, int count) {
  std::vector<std::string> keys;
  for (int i = 0; i < count; ++i) keys.push_back(prefix + std::to_string(i));
  return keys;
}

std::vector<int> key_numbers(const std::vector<std::string>& keys, const std::string& prefix) {
  std::vector<int> numbers;
  for (const std::string& key : keys) numbers.push_back(std::stoi(key.substr(prefix.size())));
  return numbers;
}

// "rank 5", "ranks 2, 3", "nodes 8-15, 24".
std::string describe_numbered(const std::string& noun, const std::vector<int>& numbers) {
  std::string text = noun + (numbers.size() == 1 ? " " : "s ");
  for (size_t i = 0; i < numbers.size();) {
    size_t end = i + 1;  // numbers[i..end) is a run of consecutive numbers
    while (end < numbers.size() && numbers[end] == numbers[end - 1] + 1) ++end;
    if (i > 0) text += ", ";
    if (end - i >= 3) {
      text += std::to_string(numbers[i]) + "-" + std::to_string(numbers[end - 1]);
    } else {
      end = i + 1;
      text += std::to_string(numbers[i]);
    }
    i = end;
  }
  return text;
}

// "node 1 not heard from" when no rank of some node has arrived yet; "" when every node has.
std::string silent_nodes(Store& store, const DistEnv& env) {
  if (env.group_world_size <= 1) return "";
  std::vector<std::string> missing = store.wait_for(numbered_keys(kNodeKey, env.group_world_size), milliseconds(0));
  if (missing.empty()) return "";
  return describe_numbered("node", key_numbers(missing, kNodeKey)) + " not heard from";
}

// Raises this process's soft limit on open files towards what a world of env.world_size needs (Note
// [The largest world] in dist/launch/env.h): one store connection per rank at rank 0, one Gloo connection per
// peer on the CPU, and room for the rest. Rank 0 refuses a hard limit below its store's need in one
// line; another rank takes what the hard limit allows, since over NCCL it needs few connections.
void make_room_for_connections(const DistEnv& env) {
  const rlim_t world = rlim_t(env.world_size);
  const rlim_t wanted = (env.is_main() ? 2 : 1) * world + 256;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur >= wanted) return;
  const bool capped = limit.rlim_max != RLIM_INFINITY && limit.rlim_max < wanted;
  if (capped && env.is_main() && limit.rlim_max < world + 256)
    throw std::runtime_error("rank 0's store needs " + std::to_string(world + 256) + " open files for a world of " +
                             std::to_string(world) + ", and the hard limit is " + std::to_string(limit.rlim_max) +
                             ": raise it (ulimit -Hn, or nofile in limits.conf)");
  limit.rlim_cur = capped ? limit.rlim_max : wanted;
  ::setrlimit(RLIMIT_NOFILE, &limit);  // cannot fail: the soft limit stays within the hard one
}

// Note [A group's generation under torchrun]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// torchrun's agents count restarts each for its own node: an agent whose ranks failed counts one,
// while an agent whose ranks were healthy restarts them for the new rendezvous round without counting
// ("membership changes do not count as retries", torch/distributed/elastic/agent/server/api.py). So
// TORCHELASTIC_RESTART_COUNT can differ between the nodes of one group, and a prefix made from it
// alone would seat one node's ranks among an older group's keys. Instead every rank claims its slot
// in a generation, "cutrain/claim/<g>/<rank>", with COMPARE_SET, from g = its restart count up: a slot
// that an older process of the same rank holds answers with that process's token, and the rank tries
// the next generation. A node's count never passes the group's generation, since every restart of any
// node starts a new group, so the ranks of a group all stop at the first generation that no process of
// their rank has claimed, and meet under "cutrain/group_<g>/". A rank killed before its claim (a
// window of one round trip after its start) leaves its slot free; its successor starts past it when
// its node counted every restart, as a prefix of the restart count would, and otherwise meets the
// older group's keys, whose ranks are gone, so that the group fails and torchrun restarts it.
int claim_generation(TorchStore& store, int rank, int from) {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  // The host and pid name the process for a reader; the random part keeps two claims of one process apart.
  const std::string token =
      std::string(host) + ":" + std::to_string(::getpid()) + ":" + std::to_string(std::random_device{}());
  int generation = from;
  while (store.compare_set("claim/" + std::to_string(generation) + "/" + std::to_string(rank), "", token) != token)
    ++generation;
  return generation;
}

}  // namespace

std::string describe_ranks(const std::vector<int>& ranks) { return describe_numbered("rank", ranks); }

std::unique_ptr<Store> rendezvous(const DistEnv& env, const RendezvousReport& report) {
  Progress progress(env.rdzv_timeout, report ? report : stderr_report(env));
  const std::string master = env.master_addr + ":" + std::to_string(env.master_port);
  const std::string me = "rank " + std::to_string(env.rank) + " (node " + std::to_string(env.group_rank) + ")";
  const std::string whose = env.use_agent_store ? "torchrun's agent's store" : "rank 0's store";
  auto on_retry = [&](const std::string& reason) {
    if (progress.due()) progress.say(me + " cannot reach " + whose + " at " + master + " yet (" + reason + ")");
  };
  make_room_for_connections(env);
  std::unique_ptr<Store> store;
  if (env.use_agent_store) {  // Note [torchrun's store] in dist/launch/torch_store.h
    auto torch_store =
        std::make_unique<TorchStore>(env.master_addr, env.master_port, "cutrain/", env.rdzv_timeout, on_retry);
    const int generation = claim_generation(*torch_store, env.rank, env.restart_count);
    torch_store->set_prefix("cutrain/group_" + std::to_string(generation) + "/");
    store = std::move(torch_store);
  } else {
    store = std::make_unique<TcpStore>(env, env.rdzv_timeout, on_retry);
  }
  store->set(kRankKey + std::to_string(env.rank), {});
  store->set(kNodeKey + std::to_string(env.group_rank), {});

  const std::vector<std::string> everyone = numbered_keys(kRankKey, env.world_size);
  const std::string of_world = " of " + std::to_string(env.world_size);
  std::string absent;  // the ranks missing at the last look
  // Rank 0 gave up (or died) first: say what it was waiting for, not that a socket closed.
  auto store_closed = [&] {
    return RendezvousFailed("rendezvous: " + whose + " closed while " + absent + of_world +
                            " had not arrived (store at " + store->address() + ")");
  };
  try {
    for (;;) {
      const milliseconds slice = progress.until_next();
      const auto asked = Clock::now();
      const std::vector<std::string> missing = store->wait_for(everyone, slice);
      if (missing.empty()) return store;
      absent = describe_ranks(key_numbers(missing, kRankKey));
      // The store answers a wait at its end; an earlier answer means rank 0's store has closed.
      if (Clock::now() - asked < slice) throw store_closed();
      const std::string nodes = silent_nodes(*store, env);
      if (progress.expired())
        throw RendezvousFailed("rendezvous: " + absent + of_world + " did not arrive within " +
                               describe(env.rdzv_timeout) + " (" + (nodes.empty() ? "" : nodes + "; ") + "store at " +
                               store->address() + ")");
      if (progress.due())
        progress.say(std::to_string(env.world_size - int(missing.size())) + of_world + " ranks here, at the store at " +
                     store->address() + "; waiting for " + absent + (nodes.empty() ? "" : " (" + nodes + ")"));
    }
  } catch (const RendezvousFailed&) {
    throw;
  } catch (const std::runtime_error&) {  // the connection to rank 0's store broke
    if (absent.empty()) throw;
    throw store_closed();
  }
}

}  // namespace cutrain
