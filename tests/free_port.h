// free_port.h: a loopback port nobody listens on now, for tests whose ranks must agree on the
// store's port before rank 0 has started it. (Another process could take it in between; in a
// test that is rare enough, and it fails loudly with "MASTER_PORT ... is in use".)
#pragma once

#include <unistd.h>

#include "dist/socket.h"

namespace cutrain::test {

inline int free_port() {
  const int fd = cutrain::listen_tcp("127.0.0.1", 0, /*loopback_only=*/true);
  const int port = cutrain::socket_port(fd);
  ::close(fd);
  return port;
}

}  // namespace cutrain::test
