// Hostile clients against a live store server: a huge length prefix, requests before joining, a
// rank out of range, a foreign run id, a request that never completes, a client that sends without
// reading, a flood of connections from one address. Each time the real ranks (TcpStore clients)
// must not notice, and the server must stop without waiting for anyone.
#include <arpa/inet.h>
#include <catch2/catch.hpp>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include "dist/launch/socket.h"
#include "dist/launch/store.h"
#include "dist/launch/store_server.h"
#include "tests/network.h"

using cutrain::Clock;
using cutrain::DistEnv;
using cutrain::Fields;
using cutrain::StoreLimits;
using cutrain::StoreServer;
using cutrain::TcpStore;
using namespace std::chrono_literals;

namespace {

using cutrain::test::u32;

const std::string kRunId = "the-job-secret";

// Time limits short enough for a test.
StoreLimits quick_limits() { return {.join_within = 300ms, .request_within = 300ms, .reply_within = 300ms}; }

// A real rank (not rank 0: the server is started by the test) of this store.
std::unique_ptr<TcpStore> real_rank(const StoreServer& server, int rank, int world_size) {
  DistEnv env;
  env.rank = rank;
  env.world_size = world_size;
  env.local_world_size = world_size;
  env.master_port = server.port();
  env.run_id = kRunId;
  return std::make_unique<TcpStore>(env, 2s);
}

// A client that speaks bytes, not the protocol's manners.
class RawClient {
 public:
  explicit RawClient(int port) : fd_(cutrain::connect_tcp("127.0.0.1", port, 2s)) {}
  // From another loopback address (the whole of 127.0.0.0/8 is this machine's): another source.
  RawClient(int port, const std::string& from) : fd_(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    ::inet_pton(AF_INET, from.c_str(), &address.sin_addr);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    ::inet_pton(AF_INET, "127.0.0.1", &address.sin_addr);
    address.sin_port = htons(uint16_t(port));
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  }
  ~RawClient() { ::close(fd_); }

  void send(const std::string& bytes) { cutrain::send_all(fd_, bytes); }
  void send(const Fields& fields) { send(cutrain::encode_frame(fields)); }
  Fields reply() { return cutrain::receive_frame(fd_, Clock::now() + 2s, "the store"); }

  // Whether the server closed the connection within `timeout` (any bytes before that are read).
  bool closed_within(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      pollfd p{fd_, POLLIN, 0};
      if (left < 0 || ::poll(&p, 1, int(left)) <= 0) return false;
      char chunk[4096];
      if (::recv(fd_, chunk, sizeof chunk, 0) <= 0) return true;
    }
  }

  int fd() const { return fd_; }

 private:
  int fd_;
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

TEST_CASE("a 64 MiB length prefix is refused at once, a stranger may send only 4 KiB, and the store serves on", "[dist]") {
  StoreServer server("127.0.0.1", 0, kRunId, 2, 0);
  std::vector<std::unique_ptr<RawClient>> probes;
  for (int i = 0; i < 8; ++i) {
    probes.push_back(std::make_unique<RawClient>(server.port()));
    probes.back()->send(u32(64u << 20));
  }
  for (auto& probe : probes) {
    CHECK(probe->reply() == Fields{"error", "a message of 67108864 bytes is over the limit of 1048576"});
    CHECK(probe->closed_within(2s));
  }
  // A frame within the limit, but far longer than a join, from a connection that has not joined.
  RawClient stranger(server.port());
  stranger.send(u32(1 << 20) + std::string(8192, 'x'));
  CHECK(stranger.reply() == Fields{"error", "too many bytes before a join"});
  CHECK(stranger.closed_within(2s));

  auto rank1 = real_rank(server, 1, 2);
  rank1->set("k", {'v'});
  CHECK(rank1->get("k") == std::vector<char>{'v'});
}

TEST_CASE("the store refuses requests before a join, a rank outside the world, and a foreign run id", "[dist]") {
  StoreServer server("127.0.0.1", 0, kRunId, 2, 0);

  RawClient early(server.port());  // knows the run id, skips the join
  early.send({"set", kRunId, "k", "v"});
  CHECK(early.reply() == Fields{"error", "a connection must join before anything else"});
  CHECK(early.closed_within(2s));

  RawClient wrapped(server.port());  // 2^32 + 1 would be rank 1 as a 32-bit int
  wrapped.send({"join", kRunId, "4294967297", "2", "0"});
  CHECK(wrapped.reply() == Fields{"error", "RANK=4294967297 is outside WORLD_SIZE=2"});
  CHECK(wrapped.closed_within(2s));

  RawClient stranger(server.port());
  stranger.send({"join", "guessed-id", "1", "2", "0"});
  Fields refusal = stranger.reply();
  CHECK(refusal.at(0) == "error");
  for (const std::string& field : refusal) {
    CHECK_THAT(field, !Catch::Contains(kRunId));  // the job's secret stays one
    CHECK_THAT(field, !Catch::Contains("guessed-id"));
  }
  CHECK(stranger.closed_within(2s));

  // Rank 1 never joined through those, so the real one still can.
  auto rank1 = real_rank(server, 1, 2);
  CHECK(rank1->add("n", 1) == 1);
}

TEST_CASE("an add that would overflow and a get with a timeout of INT64_MAX ms, against a live store", "[dist]") {
  StoreServer server("127.0.0.1", 0, kRunId, 2, 0);
  auto rank1 = real_rank(server, 1, 2);
  CHECK(rank1->add("n", INT64_MAX) == INT64_MAX);
  CHECK_THROWS_WITH(rank1->add("n", 1), Catch::EndsWith("add: 'n' would overflow a 64-bit integer"));
  CHECK(rank1->add("n", -1) == INT64_MAX - 1);  // refused, not wrapped, and the connection lives on

  RawClient rank0(server.port());
  rank0.send({"join", kRunId, "0", "2", "0"});
  REQUIRE(rank0.reply() == Fields{"ok"});
  rank0.send({"get", kRunId, "9223372036854775807", "later"});
  CHECK_FALSE(rank0.closed_within(300ms));  // no instant "timeout" from a wrapped deadline
  rank1->set("later", {'!'});
  CHECK(rank0.reply() == Fields{"ok", "!"});
}

TEST_CASE("a connection that never joins, or never finishes its request, is dropped after its time limit",
          "[dist]") {
  StoreServer server("127.0.0.1", 0, kRunId, 2, 0, quick_limits());
  RawClient idle(server.port());
  const auto start = Clock::now();
  CHECK(idle.closed_within(5s));
  CHECK(seconds_since(start) >= 0.25);

  RawClient rank0(server.port());
  rank0.send({"join", kRunId, "0", "2", "0"});
  REQUIRE(rank0.reply() == Fields{"ok"});
  rank0.send(u32(100) + u32(5) + "ab");  // a third of a request, then nothing
  CHECK(rank0.closed_within(5s));
}

TEST_CASE("a client that sends without reading stalls only itself, and the store stops without waiting for it",
          "[dist]") {
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0, kRunId, 2, 0);
  RawClient hog(server->port());
  hog.send({"join", kRunId, "0", "2", "0"});
  REQUIRE(hog.reply() == Fields{"ok"});
  hog.send({"set", kRunId, "big", std::string(512 << 10, 'x')});
  REQUIRE(hog.reply() == Fields{"ok"});

  // The hog asks for the 512 KiB value again and again and reads none of it.
  std::atomic<bool> done{false};
  std::atomic<int64_t> sent{0};
  std::thread flood([&] {
    const std::string get = cutrain::encode_frame({"get", kRunId, "0", "big"});
    while (!done) {
      ssize_t n = ::send(hog.fd(), get.data(), get.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) sent += n;
      else std::this_thread::sleep_for(1ms);  // its socket is full: the server stopped reading it
    }
  });

  auto rank1 = real_rank(*server, 1, 2);
  double slowest = 0;
  for (int i = 0; i < 50; ++i) {
    const auto start = Clock::now();
    const std::string key = std::to_string(i);
    rank1->set(key, {'v'});
    CHECK(rank1->get(key) == std::vector<char>{'v'});
    slowest = std::max(slowest, seconds_since(start));
  }
  WARN("slowest set+get of a real rank beside the hog: " << slowest * 1000 << " ms; the hog sent " << sent / 1024
                                                         << " KiB of requests");
  CHECK(slowest < 1.0);

  const auto stop = Clock::now();
  server.reset();  // rank 0's exit: must not wait for the hog
  CHECK(seconds_since(stop) < 2.0);
  done = true;
  flood.join();
}

TEST_CASE("a flood of unjoined connections from one address displaces only itself, and joined ranks stay", "[dist]") {
  StoreLimits limits;
  limits.spare_connections = 2;  // world 2 + 2: four connections at most, two unjoined per address
  StoreServer server("127.0.0.1", 0, kRunId, 2, 0, limits);
  RawClient rank0(server.port());  // from 127.0.0.1
  rank0.send({"join", kRunId, "0", "2", "0"});
  REQUIRE(rank0.reply() == Fields{"ok"});
  std::vector<std::unique_ptr<RawClient>> flood;
  for (int i = 0; i < 6; ++i) flood.push_back(std::make_unique<RawClient>(server.port(), "127.0.0.2"));
  for (int i = 0; i < 4; ++i) CHECK(flood[i]->closed_within(2s));  // each pushed out by its own address
  CHECK_FALSE(flood[4]->closed_within(100ms));
  RawClient other(server.port(), "127.0.0.3");  // the fourth connection: the store is full now
  CHECK_FALSE(other.closed_within(100ms));

  // A rank from yet another address takes the place of the crowded address's oldest, not of
  // the lone stranger's, and never of a joined rank.
  auto rank1 = real_rank(server, 1, 2);
  CHECK(rank1->add("n", 5) == 5);
  CHECK(flood[4]->closed_within(2s));
  CHECK_FALSE(flood[5]->closed_within(100ms));
  CHECK_FALSE(other.closed_within(100ms));
  rank0.send({"add", kRunId, "n", "1"});
  CHECK(rank0.reply() == Fields{"ok", "6"});
}

TEST_CASE("a rank whose connection is closed before its join is answered connects and joins again", "[dist]") {
  const int listener = cutrain::listen_tcp("127.0.0.1", 0);
  // A store that closes the first connection after reading its join, and answers the second.
  std::promise<Fields> second_join;
  std::thread store([&] {
    const auto deadline = Clock::now() + 5s;
    int first = ::accept(listener, nullptr, nullptr);
    cutrain::receive_frame(first, deadline, "rank 1");
    ::close(first);
    int second = ::accept(listener, nullptr, nullptr);
    second_join.set_value(cutrain::receive_frame(second, deadline, "rank 1"));
    cutrain::send_all(second, cutrain::encode_frame({"ok"}));
    char byte;
    (void)::recv(second, &byte, 1, 0);  // until the rank closes it
    ::close(second);
  });
  DistEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.master_port = cutrain::socket_port(listener);
  env.run_id = kRunId;
  std::vector<std::string> retries;
  {
    TcpStore rank1(env, 5s, [&](const std::string& reason) { retries.push_back(reason); });
  }
  store.join();
  ::close(listener);
  CHECK(second_join.get_future().get() == Fields{"join", kRunId, "1", "2", "0"});
  REQUIRE(retries.size() == 1);
  CHECK(retries[0] == "the store closed the connection before answering the join");
}
