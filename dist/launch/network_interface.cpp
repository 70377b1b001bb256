#include "dist/launch/network_interface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dist/launch/socket.h"

namespace cutrain {
namespace {

// This host's interfaces with their IP addresses (IPv4 first, then IPv6), in the kernel's order.
std::vector<NetworkInterface> interface_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) throw std::runtime_error("getifaddrs failed: cannot list the network interfaces");
  std::unique_ptr<ifaddrs, decltype(&::freeifaddrs)> owner(list, ::freeifaddrs);
  std::vector<NetworkInterface> found;
  for (int family : {AF_INET, AF_INET6}) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != family) continue;
      const auto* v4 = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      const auto* v6 = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      char text[INET6_ADDRSTRLEN];
      ::inet_ntop(family, family == AF_INET ? static_cast<const void*>(&v4->sin_addr) : &v6->sin6_addr, text,
                  sizeof text);
      found.push_back({i->ifa_name, text});
    }
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
  if (env.group_world_size > 1 && (route.address.starts_with("127.") || route.address == "::1")) {
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
  for (const NetworkInterface& i : interface_addresses())
    if (i.address == address) return i;
  return {"?", address};  // a route through an address no interface lists: say what is known
}

NetworkInterface interface_named(const std::string& name, const std::string& variable) {
  std::vector<std::string> names;
  for (const NetworkInterface& i : interface_addresses()) {
    if (i.name == name) return i;  // its IPv4 address when it has one
    if (std::find(names.begin(), names.end(), i.name) == names.end()) names.push_back(i.name);
  }
  std::string listed;
  for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
  throw std::runtime_error(variable + "=" + name + ": this host has no interface " + name +
                           " with an IP address (it has " + listed + ")");
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
  for (const NetworkInterface& i : interface_addresses())
    if (i.name == exact) return i;
  return {"NCCL_SOCKET_IFNAME=" + chosen, route_to_master(env).address};
}

void use_route_for_nccl(const DistEnv& env) {
  if (!variable_value("NCCL_SOCKET_IFNAME").empty()) return;
  const NetworkInterface route = route_to_master(env);
  if (route.name != "?") ::setenv("NCCL_SOCKET_IFNAME", ("=" + route.name).c_str(), /*overwrite=*/0);
}

}  // namespace cutrain
