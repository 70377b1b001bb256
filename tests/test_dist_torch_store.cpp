// TorchStore (dist/launch/torch_store.h) against the real TCPStore of torch 2.11, its libuv server and
// the classic one, and against servers that do not speak its protocol.
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "dist/launch/rendezvous.h"
#include "dist/launch/socket.h"
#include "dist/launch/store_server.h"
#include "dist/launch/torch_store.h"
#include "tests/process.h"
#include "tests/torch_python.h"

namespace {

using cutrain::TorchStore;
using cutrain::test::Process;
using namespace std::chrono_literals;

// Two TCPStore servers, libuv's and the classic one, each with a key set through a PrefixStore as
// PyTorch's workers set theirs. Each then waits for cutrain's key and says what it read.
const char* kServers = R"(
import threading
import torch.distributed as dist
servers = [dist.TCPStore("127.0.0.1", 0, is_master=True, use_libuv=libuv, wait_for_workers=False)
           for libuv in (True, False)]
for s in servers: dist.PrefixStore("cutrain/group_0", s).set("from_python", "hello")
print("ports", servers[0].port, servers[1].port, flush=True)
for name, s in zip(("libuv", "classic"), servers):
    p = dist.PrefixStore("cutrain/group_0", s)
    p.wait(["from_cutrain"])
    print(name, "read", p.get("from_cutrain").decode(), "count", p.add("count", 0), flush=True)
threading.Event().wait()  # until the test kills it
)";

// torchrun's agent's store, as far as the workers see it.
const char* kAgentStore = R"(
import threading
import torch.distributed as dist
store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
print("port", store.port, flush=True)
threading.Event().wait()
)";

// A one-connection server thread that answers what `answer` says to the bytes it reads.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(int)> answer) : listener_(cutrain::listen_tcp("127.0.0.1", 0)) {
    port_ = cutrain::socket_port(listener_);
    thread_ = std::thread([this, answer] {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      answer(fd);
      ::close(fd);
    });
  }
  ~FakeServer() {
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  int port() const { return port_; }

 private:
  int listener_;
  int port_ = 0;
  std::thread thread_;
};

// Reads the handshake (VALIDATE and PING, 10 bytes) and returns the ping's nonce bytes.
std::string read_handshake(int fd) {
  const std::string hello = cutrain::receive_exact(fd, 10, cutrain::Clock::now() + 10s, "the test's client");
  return hello.substr(6, 4);
}

}  // namespace

TEST_CASE("TorchStore speaks the TCPStore protocol of torch 2.11, to its libuv and classic servers", "[dist]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  Process servers({python, "-c", kServers});
  REQUIRE(servers.read_until("\n", 1, 60));
  int libuv_port = 0, classic_port = 0;
  REQUIRE(std::sscanf(servers.output().c_str(), "ports %d %d", &libuv_port, &classic_port) == 2);

  for (const auto& [name, port] : {std::pair{"libuv", libuv_port}, std::pair{"classic", classic_port}}) {
    INFO(name << " server");
    TorchStore store("127.0.0.1", port, "cutrain/group_0/", 10s);
    const std::vector<char> hello = store.get("from_python");
    CHECK(std::string(hello.begin(), hello.end()) == "hello");
    CHECK(store.add("count", 3) == 3);
    CHECK(store.add("count", -1) == 2);
    const std::vector<char> count = store.get("count");
    CHECK(std::string(count.begin(), count.end()) == "2");  // ADD keeps decimal text, as cutrain's store does
    CHECK(store.wait_for({"from_python", "never", "count"}, 50ms) == std::vector<std::string>{"never"});
    CHECK_THROWS_WITH(store.get("never", 50ms), "store: key 'never' was not set within 50 ms");
    CHECK(store.wait_for({"from_python", "count"}, 0ms).empty());  // the answer of a check, even with no time
    const std::string value(70'000, 'v');  // more than one socket read
    store.set("long", std::vector<char>(value.begin(), value.end()));
    const std::vector<char> back = store.get("long");
    CHECK(std::string(back.begin(), back.end()) == value);
    // COMPARE_SET, as both servers answer it: a missing key with another expected value stays missing.
    CHECK(store.compare_set("slot", "someone", "me") == "someone");
    CHECK(store.wait_for({"slot"}, 0ms) == std::vector<std::string>{"slot"});
    CHECK(store.compare_set("slot", "", "me") == "me");
    CHECK(store.compare_set("slot", "", "other") == "me");
    CHECK(store.compare_set("slot", "me", "next") == "next");
    // MULTI_GET, in the order asked.
    const std::vector<std::vector<char>> values = store.get_all({"slot", "from_python", "count"});
    CHECK(values == std::vector<std::vector<char>>{{'n', 'e', 'x', 't'}, {'h', 'e', 'l', 'l', 'o'}, {'2'}});
    store.set("from_cutrain", {'h', 'i'});
    CHECK(servers.read_until(std::string(name) + " read hi count 2", 1, 30));
  }
}

TEST_CASE("TorchStore says in one line what answered when the server is not PyTorch's TCPStore", "[dist]") {
  SECTION("cutrain's own store") {
    cutrain::StoreServer own("127.0.0.1", 0, "run", 2, 0);
    CHECK_THROWS_WITH(TorchStore("127.0.0.1", own.port(), "p/", 5s),
                      Catch::Contains("speaks cutrain's own store protocol") &&
                          Catch::Contains("TORCHELASTIC_USE_AGENT_STORE"));
  }
  SECTION("a server that closes at the handshake") {
    FakeServer closes([](int fd) { read_handshake(fd); });
    CHECK_THROWS_WITH(TorchStore("127.0.0.1", closes.port(), "p/", 5s),
                      Catch::Contains("closed the connection at the handshake: it does not speak PyTorch's TCPStore "
                                      "protocol (validation 0x3C85F7CE, then PING)"));
  }
  SECTION("a server that answers the ping with something else") {
    FakeServer garbage([](int fd) {
      read_handshake(fd);
      cutrain::send_all(fd, "HTTP/1.1 400 Bad Request\r\n");
    });
    CHECK_THROWS_WITH(TorchStore("127.0.0.1", garbage.port(), "p/", 5s),
                      Catch::Contains("answered the ping with 0x48545450") && Catch::Contains("not its nonce"));
  }
  SECTION("a server that never answers") {
    FakeServer silent([](int fd) {
      read_handshake(fd);
      char byte;
      (void)!::recv(fd, &byte, 1, 0);  // until the client goes
    });
    CHECK_THROWS_WITH(TorchStore("127.0.0.1", silent.port(), "p/", 200ms),
                      Catch::Contains("did not answer the handshake within 200 ms"));
  }
  SECTION("a value over the limit, and a reply that is no reply") {
    FakeServer huge([](int fd) {
      cutrain::send_all(fd, read_handshake(fd));  // a good ping
      cutrain::receive_exact(fd, 1 + 8 + 8 + 4, cutrain::Clock::now() + 10s, "the client");  // WAIT for "/p/k"
      std::string reply(1, '\0');  // STOP_WAITING
      const uint64_t length = uint64_t(1) << 40;
      reply.append(reinterpret_cast<const char*>(&length), sizeof length);  // GET's value length
      cutrain::send_all(fd, reply);
      char byte;
      (void)!::recv(fd, &byte, 1, 0);
    });
    TorchStore store("127.0.0.1", huge.port(), "p/", 5s);
    CHECK_THROWS_WITH(store.get("k"), Catch::Contains("answered GET with a value of 1099511627776 bytes, over the "
                                                      "limit of 1048576"));
    // What follows on the connection cannot be read: it is given up.
    CHECK_THROWS_WITH(store.add("n", 1), Catch::Contains("the connection was given up at an earlier reply"));
  }
  SECTION("a store that closes during a wait") {
    FakeServer leaves([](int fd) { cutrain::send_all(fd, read_handshake(fd)); });
    TorchStore store("127.0.0.1", leaves.port(), "p/", 5s);
    CHECK_THROWS_WITH(store.wait({"k"}), Catch::Contains("the connection closed"));
  }
}

TEST_CASE("under torchrun a restarted group meets in a generation of its own, whatever each node's restart count",
          "[dist]") {
  std::string python;
  CUTRAIN_REQUIRE_TORCH(python);
  Process agent({python, "-c", kAgentStore});
  REQUIRE(agent.read_until("\n", 1, 60));
  int port = 0;
  REQUIRE(std::sscanf(agent.output().c_str(), "port %d", &port) == 1);
  // Ranks 0 and 1 of 2, each on a node of its own, started with the given restart counts; whether
  // each met the other.
  auto group = [&](std::vector<int> restart_counts) {
    std::vector<std::thread> ranks;
    std::vector<int> met(restart_counts.size(), 0);
    for (size_t rank = 0; rank < restart_counts.size(); ++rank)
      ranks.emplace_back([&, rank] {
        cutrain::DistEnv env;
        env.rank = env.group_rank = int(rank);
        env.world_size = env.group_world_size = 2;
        env.master_port = port;
        env.use_agent_store = true;
        env.rdzv_timeout = 2s;
        env.restart_count = restart_counts[rank];
        try {
          cutrain::rendezvous(env, [](const std::string&) {});
          met[rank] = 1;
        } catch (const std::exception&) {
        }
      });
    for (std::thread& t : ranks) t.join();
    return met;
  };
  CHECK(group({0, 0}) == std::vector<int>{1, 1});  // generation 0
  // Rank 1's node counted the restart, rank 0's (healthy, restarted for the new round) did not: under
  // a prefix of the restart count, rank 0 would have met generation 0's rank 1 and rank 1 nobody.
  CHECK(group({0, 1}) == std::vector<int>{1, 1});  // generation 1
  // Rank 1 is killed before it claims generation 2, where rank 0 waits in vain; both nodes count the
  // restart, and the successors meet in generation 3.
  CHECK(group({2}) == std::vector<int>{0});
  CHECK(group({3, 3}) == std::vector<int>{1, 1});
}
