// Which interface the collectives use: the route to MASTER_ADDR, or GLOO_SOCKET_IFNAME /
// NCCL_SOCKET_IFNAME when set, and NCCL_SOCKET_IFNAME filled in from the route when not. Here
// only loopback exists for sure; tests/scripts/test_two_nodes.sh sees a veth pair chosen.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <optional>

#include "dist/launch/network_interface.h"

using cutrain::DistEnv;

namespace {

// Sets (or, with nullopt, unsets) an environment variable for one test, then puts it back.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, std::optional<std::string> value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value->c_str(), 1) : ::unsetenv(name);
  }
  ~ScopedVariable() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// Rank 1 of a job of two on this machine, meeting at loopback.
DistEnv two_ranks() {
  DistEnv env;
  env.rank = 1;
  env.world_size = 2;
  env.local_world_size = 2;
  return env;
}

std::string loopback_name() { return cutrain::interface_toward("127.0.0.1", 29500).name; }

}  // namespace

TEST_CASE("the route to MASTER_ADDR names its interface and address", "[dist]") {
  const cutrain::NetworkInterface lo = cutrain::interface_toward("127.0.0.1", 29500);
  CHECK(lo.address == "127.0.0.1");
  CHECK(lo.name != "?");
  CHECK(cutrain::interface_named(lo.name, "GLOO_SOCKET_IFNAME").address == "127.0.0.1");
  ScopedVariable gloo("GLOO_SOCKET_IFNAME", std::nullopt);
  CHECK(cutrain::gloo_interface(two_ranks()).name == lo.name);
}

TEST_CASE("GLOO_SOCKET_IFNAME picks Gloo's interface, and a wrong one is one line", "[dist]") {
  {
    ScopedVariable gloo("GLOO_SOCKET_IFNAME", loopback_name());
    CHECK(cutrain::gloo_interface(two_ranks()).address == "127.0.0.1");
  }
  {
    ScopedVariable gloo("GLOO_SOCKET_IFNAME", "nosuch0");
    CHECK_THROWS_WITH(cutrain::gloo_interface(two_ranks()),
                      Catch::StartsWith("GLOO_SOCKET_IFNAME=nosuch0: this host has no interface nosuch0 with an IP "
                                        "address (it has ") &&
                          Catch::Contains(loopback_name()));
  }
  {
    ScopedVariable gloo("GLOO_SOCKET_IFNAME", "eth0,eth1");
    CHECK_THROWS_WITH(cutrain::gloo_interface(two_ranks()),
                      "GLOO_SOCKET_IFNAME=eth0,eth1: cutrain's Gloo listens on one interface; name one");
  }
}

TEST_CASE("NCCL_SOCKET_IFNAME is set from the route unless the user set it", "[dist]") {
  {
    ScopedVariable nccl("NCCL_SOCKET_IFNAME", std::nullopt);
    cutrain::use_route_for_nccl(two_ranks());
    REQUIRE(std::getenv("NCCL_SOCKET_IFNAME") != nullptr);
    std::string exact = "=";  // NCCL's exact match
    exact += loopback_name();
    CHECK(std::getenv("NCCL_SOCKET_IFNAME") == exact);
    CHECK(cutrain::nccl_interface(two_ranks()).name == loopback_name());
  }
  {
    ScopedVariable nccl("NCCL_SOCKET_IFNAME", "^docker,virbr");
    cutrain::use_route_for_nccl(two_ranks());
    CHECK(std::string(std::getenv("NCCL_SOCKET_IFNAME")) == "^docker,virbr");
    const cutrain::NetworkInterface nic = cutrain::nccl_interface(two_ranks());
    CHECK(nic.name == "NCCL_SOCKET_IFNAME=^docker,virbr");  // a pattern: shown as given
    CHECK(nic.address == "127.0.0.1");
  }
}
