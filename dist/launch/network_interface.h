// network_interface.h: which network interface a rank's collectives use, and with which address.
//
// The store only needs MASTER_ADDR. The collectives connect every rank to every other, so each
// rank must advertise an address its peers can reach. The rule, for Gloo and NCCL alike:
//   - GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, when set, as in PyTorch (the user knows best);
//   - else the interface whose address routes to MASTER_ADDR: the network the store is on, which
//     every node has just shown it can reach.
// Gloo is given that address to listen on. NCCL reads NCCL_SOCKET_IFNAME itself, once, at its
// first call in the process, so use_route_for_nccl() sets it ("=eth0", NCCL's exact match) before
// then, unless the user already has. The trainer's banner prints each rank's choice.
//
// A rank whose route to MASTER_ADDR is a loopback address in a job of several nodes (MASTER_ADDR
// a host name that /etc/hosts maps to 127.0.1.1, say) is warned on stderr: other hosts cannot
// reach it there.
#pragma once

#include <string>

#include "dist/launch/env.h"

namespace cutrain {

struct NetworkInterface {
  std::string name;     // "eth0"; for an NCCL_SOCKET_IFNAME that is a pattern, "NCCL_SOCKET_IFNAME=^docker"
  std::string address;  // "10.0.0.2" (or an IPv6 address)
};

// The interface and local address that route to host:port. Sends nothing.
NetworkInterface interface_toward(const std::string& host, int port);

// The interface called `name` and its address (IPv4 when it has one); throws one line naming
// `variable` (where the name came from) when this host has no such interface.
NetworkInterface interface_named(const std::string& name, const std::string& variable);

// Where this rank's Gloo listens: GLOO_SOCKET_IFNAME's interface, or the route to MASTER_ADDR.
NetworkInterface gloo_interface(const DistEnv& env);

// What NCCL uses: NCCL_SOCKET_IFNAME's interface(s), or the route to MASTER_ADDR.
NetworkInterface nccl_interface(const DistEnv& env);

// Sets NCCL_SOCKET_IFNAME to the route's interface unless it is set. Call before any NCCL call.
void use_route_for_nccl(const DistEnv& env);

}  // namespace cutrain
