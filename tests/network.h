// network.h: ports for tests. free_port() is a loopback port nobody listens on now, for tests whose
// ranks must agree on the store's port before rank 0 has started it (another process could take it
// in between; rare in a test, and loud: "MASTER_PORT ... is in use").
// Tests that need IPv6 start with CUTRAIN_REQUIRE_IPV6(). Without an IPv6 loopback (a container
// with IPv6 turned off) the test prints "SKIPPED: no IPv6 loopback: <why>" and returns; CTest
// reports it as skipped.
#pragma once

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <iostream>
#include <string>

#include "dist/launch/socket.h"

namespace cutrain::test {

inline int free_port() {
  const int fd = cutrain::listen_tcp("127.0.0.1", 0);
  const int port = cutrain::socket_port(fd);
  ::close(fd);
  return port;
}

// A port free on ::1 now, or -1 with `why` set when this machine has no IPv6 loopback.
inline int free_ipv6_port(std::string& why) {
  try {
    int fd = cutrain::listen_tcp("::1", 0);
    int port = cutrain::socket_port(fd);
    ::close(fd);
    return port;
  } catch (const std::exception& e) {
    why = e.what();
    return -1;
  }
}

// `value` as the store's frames carry a 32-bit field: 4 bytes, little-endian.
inline std::string u32(uint32_t value) {
  std::string bytes;
  for (int i = 0; i < 4; ++i) bytes.push_back(char((value >> (8 * i)) & 0xff));
  return bytes;
}

}  // namespace cutrain::test

#define CUTRAIN_REQUIRE_IPV6(port)                                       \
  std::string ipv6_missing_;                                             \
  const int port = ::cutrain::test::free_ipv6_port(ipv6_missing_);      \
  do {                                                                   \
    if (port < 0) {                                                      \
      std::cout << "SKIPPED: no IPv6 loopback: " << ipv6_missing_ << "\n"; \
      WARN("SKIPPED: no IPv6 loopback: " << ipv6_missing_);              \
      return;                                                            \
    }                                                                    \
  } while (0)
