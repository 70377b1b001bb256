// The TCP store: operations, waiting, and the one-line refusals (another run, another world size,
// a busy port, a store that cannot be reached). Ranks are threads of this process here;
// test_dist_rendezvous.cpp has the meeting of all ranks, test_dist_collectives.cpp real processes.
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <future>
#include <thread>

#include "dist/launch/rendezvous.h"
#include "dist/launch/socket.h"
#include "dist/launch/store.h"
#include "tests/network.h"
#include "tests/process.h"

using cutrain::DistEnv;
using cutrain::TcpStore;
using namespace std::chrono_literals;

namespace {

// Rank `rank` of a world of `world_size` whose store is at 127.0.0.1:port (0: rank 0 picks one).
DistEnv rank_env(int rank, int world_size, int port, std::string run_id = "test-run") {
  DistEnv env;
  env.rank = rank;
  env.world_size = world_size;
  env.local_world_size = world_size;  // every rank on this host
  env.master_port = port;
  env.run_id = std::move(run_id);
  return env;
}

std::string text(const std::vector<char>& bytes) { return std::string(bytes.begin(), bytes.end()); }

// Whether something listens at host:port: a connection is accepted within a moment.
bool reachable(const std::string& host, int port) {
  try {
    ::close(cutrain::connect_tcp(host, port, 50ms));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace

TEST_CASE("the store sets, gets, adds and waits", "[dist]") {
  TcpStore store(DistEnv{}, 5s);  // a world of one: its own free loopback port
  store.set("greeting", {'h', 'i'});
  CHECK(text(store.get("greeting")) == "hi");
  store.set("greeting", {'y', 'o'});
  CHECK(text(store.get("greeting")) == "yo");
  CHECK(store.add("counter", 2) == 2);
  CHECK(store.add("counter", -5) == -3);
  CHECK(text(store.get("counter")) == "-3");
  store.set("empty", {});
  CHECK(store.get("empty").empty());
  CHECK_NOTHROW(store.wait({"greeting", "counter", "empty"}));
  CHECK(store.wait_for({"greeting", "absent", "gone"}, 50ms) == std::vector<std::string>{"absent", "gone"});
}

TEST_CASE("a get waits for another rank's set, and times out naming the key", "[dist]") {
  TcpStore server(rank_env(0, 2, 0), 5s);
  TcpStore client(rank_env(1, 2, server.port()), 5s);
  auto value = std::async(std::launch::async, [&] { return text(client.get("nccl/id")); });
  server.set("nccl/id", {'4', '2'});
  CHECK(value.get() == "42");
  CHECK_THROWS_WITH(client.get("never", 200ms), "store: key 'never' was not set within 200 ms");
  // The connection is still in step after a timeout.
  CHECK(server.add("after", 1) == 1);
  CHECK(text(client.get("after")) == "1");
}

TEST_CASE("the store refuses a client of another run, another world size, or a rank seen twice", "[dist]") {
  TcpStore server(rank_env(0, 2, 0, "run-a"), 5s);
  CHECK_THROWS_WITH(TcpStore(rank_env(1, 2, server.port(), "run-b"), 5s),
                    Catch::Contains("this store belongs to another run (another job on the same MASTER_PORT?)"));
  CHECK_THROWS_WITH(TcpStore(rank_env(1, 3, server.port(), "run-a"), 5s),
                    Catch::Contains("rank 1 has WORLD_SIZE=3 but rank 0 has WORLD_SIZE=2"));
  TcpStore rank1(rank_env(1, 2, server.port(), "run-a"), 5s);
  CHECK_THROWS_WITH(TcpStore(rank_env(1, 2, server.port(), "run-a"), 5s), Catch::Contains("rank 1 joined twice"));
}

TEST_CASE("a MASTER_PORT in use is one clear line", "[dist]") {
  int busy = cutrain::listen_tcp("127.0.0.1", 0);
  int port = cutrain::socket_port(busy);
  CHECK_THROWS_WITH(TcpStore(rank_env(0, 2, port), 1s),
                    Catch::StartsWith("MASTER_PORT " + std::to_string(port) + " on 127.0.0.1 is in use"));
  ::close(busy);
}

TEST_CASE("a rank that cannot reach rank 0's store gives up after the timeout, naming why", "[dist]") {
  const int port = cutrain::test::free_port();
  std::vector<std::string> reasons;
  CHECK_THROWS_WITH(TcpStore(rank_env(1, 2, port), 300ms, [&](const std::string& why) { reasons.push_back(why); }),
                    "could not reach the store of rank 0 at 127.0.0.1:" + std::to_string(port) +
                        " within 300 ms (Connection refused): is MASTER_ADDR rank 0's address, and did rank 0 start?");
  REQUIRE(!reasons.empty());  // each failed attempt is reported while it retries
  CHECK(reasons.front() == "Connection refused");
}

TEST_CASE("a store that never answers does not hold a rank past its timeout", "[dist]") {
  // A listener whose queue is full drops new connections' first packets unanswered, as a host
  // behind a firewall does: connect() alone would wait minutes for an answer.
  int full = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(::bind(full, reinterpret_cast<sockaddr*>(&address), length) == 0);
  REQUIRE(::listen(full, 0) == 0);
  REQUIRE(::getsockname(full, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  const int port = ntohs(address.sin_port);
  std::vector<int> queued;  // fill the queue: these connect, and nobody accepts them
  for (int i = 0; i < 2; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ::connect(fd, reinterpret_cast<sockaddr*>(&address), length);
    queued.push_back(fd);
  }
  // One handshake completes and fills the queue; later SYNs, the store's included, go unanswered.
  std::vector<pollfd> handshakes;
  for (int fd : queued) handshakes.push_back({fd, POLLOUT, 0});
  REQUIRE(::poll(handshakes.data(), handshakes.size(), 10'000) > 0);

  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(TcpStore(rank_env(1, 2, port), 1500ms),
                    Catch::StartsWith("could not reach the store of rank 0 at 127.0.0.1:" + std::to_string(port) +
                                      " within 1.5 s (no answer)"));
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // not the minutes of connect()'s own retries
  for (int fd : queued) ::close(fd);
  ::close(full);
}

TEST_CASE("the store listens at MASTER_ADDR only, or where CUTRAIN_STORE_BIND says", "[dist]") {
  // 127.0.0.2 is this machine too, but not the address the store was told: nothing answers there.
  TcpStore store(rank_env(0, 2, 0), 5s);
  CHECK(reachable("127.0.0.1", store.port()));
  CHECK_FALSE(reachable("127.0.0.2", store.port()));

  DistEnv everywhere = rank_env(0, 2, 0);
  everywhere.store_bind = "0.0.0.0";
  TcpStore bound(everywhere, 5s);
  CHECK(reachable("127.0.0.2", bound.port()));
}

TEST_CASE("a store for several nodes refuses to listen where only this machine can reach it", "[dist]") {
  DistEnv two_nodes = rank_env(0, 4, 0);
  two_nodes.local_world_size = 2;
  CHECK_THROWS_WITH(TcpStore(two_nodes, 1s),
                    "MASTER_ADDR 127.0.0.1 is a loopback address here, which the other nodes cannot reach: give "
                    "cutrun --master-addr an address of this machine on their network (or --store-bind)");
  DistEnv elsewhere = rank_env(0, 2, 0);
  elsewhere.master_addr = "192.0.2.1";  // TEST-NET-1: never an address of this machine
  CHECK_THROWS_WITH(TcpStore(elsewhere, 1s), Catch::StartsWith("the store cannot listen on 192.0.2.1: it is not an "
                                                               "address of this machine"));
}

TEST_CASE("the store and the rendezvous work over IPv6", "[dist]") {
  CUTRAIN_REQUIRE_IPV6(port);
  DistEnv rank0 = rank_env(0, 2, port);
  DistEnv rank1 = rank_env(1, 2, port);
  for (DistEnv* env : {&rank0, &rank1}) {
    env->master_addr = "::1";
    env->rdzv_timeout = 5s;
  }
  auto other = std::async(std::launch::async, [&] { return cutrain::rendezvous(rank1); });
  std::unique_ptr<cutrain::Store> server;
  CHECK_NOTHROW(server = cutrain::rendezvous(rank0));
  REQUIRE(server);
  CHECK(server->address() == "[::1]:" + std::to_string(port));
  CHECK_NOTHROW(other.get());
  CHECK_FALSE(reachable("127.0.0.1", port));
}
