#include "dist/interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dist/socket.h"

namespace cutrain {
namespace {

// This host's interfaces with an IPv4 address: name and address, in the kernel's order.
std::vector<NetworkInterface> ipv4_interfaces() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw std::runtime_error("getifaddrs failed: cannot list the network interfaces");
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owner(list, ::freeifaddrs);
  std::vector<NetworkInterface> found;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found.push_back({i->ifa_name, text});
  }
  return found;
}

std::string variable_value(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "" : value;
}

// The route to MASTER_ADDR (loopback for a world of one, whose store is on loopback too).
NetworkInterface route_to_master(const DistEnv& env) {
  if (env.world_size == 1) return interface_toward("127.0.0.1", env.master_port);
  NetworkInterface route = interface_toward(env.master_addr, env.master_port);
  if (env.group_world_size > 1 && route.address.starts_with("127.")) {
    static bool warned = false;  // once per process
    if (!warned && env.local_rank == 0)
      std::fprintf(stderr,
                   "cutrain: warning: node %d reaches MASTER_ADDR %s over loopback (%s, %s), which ranks on other "
                   "hosts cannot reach: give node 0's network address as the master address, or set "
                   "GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME\n",
                   env.group_rank, env.master_addr.c_str(), route.name.c_str(), route.address.c_str());
    warned = true;
  }
  return route;
}

}  // namespace

NetworkInterface interface_toward(const std::string& host, int port) {
  const std::string address = local_address_toward(host, port);
  for (const NetworkInterface& i : ipv4_interfaces())
    if (i.address == address) return i;
  return {"?", address};  // a route through an address no interface lists: say what is known
}

NetworkInterface interface_named(const std::string& name, const std::string& variable) {
  const std::vector<NetworkInterface> interfaces = ipv4_interfaces();
  std::string names;
  for (const NetworkInterface& i : interfaces) {
    if (i.name == name) return i;
    names += (names.empty() ? "" : ", ") + i.name;
  }
  throw std::runtime_error(variable + "=" + name + ": this host has no interface " + name +
                           " with an IPv4 address (it has " + names + ")");
}

NetworkInterface gloo_interface(const DistEnv& env) {
  const std::string chosen = variable_value("GLOO_SOCKET_IFNAME");
  if (chosen.empty()) return route_to_master(env);
  if (chosen.find(',') != std::string::npos)
    throw std::runtime_error("GLOO_SOCKET_IFNAME=" + chosen + ": cutrain's Gloo listens on one interface; name one");
  return interface_named(chosen, "GLOO_SOCKET_IFNAME");
}

NetworkInterface nccl_interface(const DistEnv& env) {
  const std::string chosen = variable_value("NCCL_SOCKET_IFNAME");
  if (chosen.empty()) return route_to_master(env);
  // NCCL's syntax: "=eth0" is exactly eth0; "eth" any name starting so; "^docker" none of those;
  // a comma separates several. Only the first names one interface we can look up.
  const std::string exact = chosen.starts_with("=") ? chosen.substr(1) : chosen;
  for (const NetworkInterface& i : ipv4_interfaces())
    if (i.name == exact) return i;
  return {"NCCL_SOCKET_IFNAME=" + chosen, route_to_master(env).address};
}

void use_route_for_nccl(const DistEnv& env) {
  if (!variable_value("NCCL_SOCKET_IFNAME").empty()) return;
  const NetworkInterface route = route_to_master(env);
  if (route.name != "?") ::setenv("NCCL_SOCKET_IFNAME", ("=" + route.name).c_str(), /*overwrite=*/0);
}

}  // namespace cutrain
