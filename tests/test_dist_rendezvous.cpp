// The rendezvous: every rank meets at rank 0's store, and while some are missing the waiting ones
// say what they wait for, and then one line names what never came. Ranks are threads of this
// process here; tests/scripts/test_two_nodes.sh has two hosts (network namespaces).
#include <catch2/catch.hpp>
#include <future>
#include <mutex>
#include <thread>

#include <gloo/transport/tcp/address.h>

#include "dist/launch/rendezvous.h"
#include "tests/network.h"

using cutrain::DistEnv;
using cutrain::rendezvous;
using namespace std::chrono_literals;

namespace {

// Rank `rank` of `nodes` nodes with `per_node` ranks each, meeting at 127.0.0.1:port.
DistEnv rank_env(int rank, int nodes, int per_node, int port, std::chrono::milliseconds timeout) {
  DistEnv env;
  env.rank = rank;
  env.world_size = nodes * per_node;
  env.local_rank = rank % per_node;
  env.local_world_size = per_node;
  env.group_rank = rank / per_node;
  env.group_world_size = nodes;
  env.master_port = port;
  env.run_id = "test-run";
  env.rdzv_timeout = timeout;
  env.store_bind = "127.0.0.1";  // "nodes" on this one host: the store may listen on loopback
  return env;
}

// The waiting lines one rank reports.
struct Lines {
  cutrain::RendezvousReport report() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mutex);
      all.push_back(line);
    };
  }
  std::mutex mutex;
  std::vector<std::string> all;
};

void ignore(const std::string&) {}

}  // namespace

TEST_CASE("rendezvous returns once every rank has arrived, whoever starts first", "[dist]") {
  const int port = cutrain::test::free_port();
  std::vector<std::future<std::unique_ptr<cutrain::Store>>> others;
  // Ranks 1 and 2 start first, most likely before rank 0 serves the store, and retry until it does
  // (either order passes). With a timeout of 60 s, rank 0 would say whom it waits for after 15 s
  // (kReportEvery in dist/launch/rendezvous.cpp), which no loaded machine makes them late by.
  for (int r = 1; r < 3; ++r)
    others.push_back(std::async(std::launch::async, [=] { return rendezvous(rank_env(r, 3, 1, port, 60s), ignore); }));
  std::this_thread::sleep_for(200ms);
  Lines lines;
  std::unique_ptr<cutrain::Store> store;  // rank 0's store lives on after the meeting
  CHECK_NOTHROW(store = rendezvous(rank_env(0, 3, 1, port, 60s), lines.report()));
  for (auto& o : others) CHECK_NOTHROW(o.get());
  CHECK(lines.all.empty());  // nothing to say when nobody is late
}

TEST_CASE("rendezvous says whom it waits for, then names the ranks and the node that never came", "[dist]") {
  // Node 0 (ranks 0, 1) is here; node 1 (ranks 2, 3) never starts.
  const int port = cutrain::test::free_port();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  auto rank1 = std::async(std::launch::async, [=] { rendezvous(rank_env(1, 2, 2, port, 2s), ignore); });
  Lines lines;
  CHECK_THROWS_WITH(rendezvous(rank_env(0, 2, 2, port, 2s), lines.report()),
                    "rendezvous: ranks 2, 3 of 4 did not arrive within 2 s (node 1 not heard from; store at " +
                        store + ")");
  CHECK_THROWS_WITH(rank1.get(), Catch::StartsWith("rendezvous: ") && Catch::Contains("ranks 2, 3 of 4"));
  // A line every quarter of the timeout (2 s / 4 = 500 ms): three before the end, give or take one.
  REQUIRE(lines.all.size() >= 2);
  CHECK(lines.all.size() <= 4);
  for (const std::string& line : lines.all)
    CHECK_THAT(line, Catch::StartsWith("rendezvous: 2 of 4 ranks here, at the store at " + store +
                                       "; waiting for ranks 2, 3 (node 1 not heard from); giving up in "));
  CHECK_THAT(lines.all.front(), Catch::EndsWith("giving up in 2 s"));  // 1.5 s left, rounded up
}

TEST_CASE("rendezvous names a missing rank of a node that did come, without blaming the node", "[dist]") {
  const int port = cutrain::test::free_port();
  std::vector<std::future<void>> others;
  for (int r = 1; r < 3; ++r)
    others.push_back(std::async(std::launch::async, [=] { rendezvous(rank_env(r, 2, 2, port, 1s), ignore); }));
  CHECK_THROWS_WITH(rendezvous(rank_env(0, 2, 2, port, 1s), ignore),
                    "rendezvous: rank 3 of 4 did not arrive within 1 s (store at 127.0.0.1:" + std::to_string(port) +
                        ")");
  for (auto& o : others) CHECK_THROWS(o.get());
}

TEST_CASE("at the largest world the rendezvous' wait and Gloo's addresses fit in one store message", "[dist]") {
  // Note [The largest world] in dist/launch/env.h: rank 0 alone, waiting for every other rank's key in one
  // message, ends by naming them, and the value that Gloo's full mesh has each rank publish, one address
  // per peer, goes through the store.
  const int world = cutrain::kMaxWorldSize;
  const int port = cutrain::test::free_port();
  CHECK_THROWS_WITH(rendezvous(rank_env(0, 1, world, port, 1s), ignore),
                    "rendezvous: ranks 1-" + std::to_string(world - 1) + " of " + std::to_string(world) +
                        " did not arrive within 1 s (store at 127.0.0.1:" + std::to_string(port) + ")");
  DistEnv env = rank_env(0, 1, 1, cutrain::test::free_port(), 5s);
  cutrain::TcpStore one(env, 5s);
  const std::vector<char> addresses(size_t(world - 1) * gloo::transport::tcp::Address().bytes().size(), 'a');
  one.set("gloo/0", addresses);
  CHECK(one.get("gloo/0") == addresses);
}

TEST_CASE("a rank that cannot reach rank 0's store says so while it retries", "[dist]") {
  const int port = cutrain::test::free_port();
  const std::string store = "127.0.0.1:" + std::to_string(port);
  Lines lines;
  CHECK_THROWS_WITH(rendezvous(rank_env(2, 2, 2, port, 1200ms), lines.report()),
                    "could not reach the store of rank 0 at " + store +
                        " within 1.2 s (Connection refused): is MASTER_ADDR rank 0's address, and did rank 0 start?");
  REQUIRE(!lines.all.empty());  // a line at most every 300 ms, as the retries (backing off to 1 s) come
  CHECK_THAT(lines.all.front(), Catch::StartsWith("rendezvous: rank 2 (node 1) cannot reach rank 0's store at " +
                                                  store + " yet (Connection refused); giving up in "));
}

TEST_CASE("ranks are listed in order, with runs of three or more as ranges", "[dist]") {
  using cutrain::describe_ranks;
  CHECK(describe_ranks({5}) == "rank 5");
  CHECK(describe_ranks({2, 3}) == "ranks 2, 3");
  CHECK(describe_ranks({1, 2, 3}) == "ranks 1-3");
  CHECK(describe_ranks({0, 8, 9, 10, 11, 13, 14, 24}) == "ranks 0, 8-11, 13, 14, 24");
}
