// socket.h: the few TCP calls the store needs, IPv4 or IPv6, with deadlines and one-line errors.
// The store's messages are frames of fields (dist/launch/store_protocol.h).
#pragma once

#include <chrono>
#include <functional>
#include <stdexcept>
#include <string>

#include "dist/launch/store_protocol.h"

namespace cutrain {

// A listening socket on `host`'s address (a name or a literal: "127.0.0.1", "::1", "node0", or
// "0.0.0.0" for every interface) at `port` (0: any free port). A port in use throws
// "MASTER_PORT 29500 on <host> is in use ..."; an address of another machine says so.
int listen_tcp(const std::string& host, int port);

// The port a bound socket listens on.
int socket_port(int fd);

// Whether a bound socket listens on a loopback address (127.0.0.0/8 or ::1), which other
// machines cannot reach.
bool listens_on_loopback(int fd);

// "127.0.0.1:29500", or "[::1]:29500" for an IPv6 address: host and port for messages.
std::string host_port(const std::string& host, int port);

// Called after each failed attempt while connect_tcp retries, with the reason ("Connection refused").
using ConnectRetry = std::function<void(const std::string& reason)>;

// Connects to host:port, retrying while nobody listens yet (or the host does not answer), for
// `timeout`; then throws naming the address and the last reason. Unknown hosts throw at once.
int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout,
                const ConnectRetry& on_retry = {});

// The IP address of this machine's interface that routes to host:port ("127.0.0.1" or "::1" for
// loopback); dist/launch/network_interface.h finds the interface's name. Sends nothing.
std::string local_address_toward(const std::string& host, int port);

// What send_all(), receive_frame() and receive_exact() throw when the other end closed the connection (or reset it),
// as opposed to a timeout or a failing socket.
struct ConnectionClosed : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What receive_frame() and receive_exact() throw when their deadline passed first.
struct NoReply : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void send_all(int fd, const std::string& bytes);

// Reads one frame, waiting until `deadline`. Throws on timeout or a closed connection, naming `peer`.
Fields receive_frame(int fd, Clock::time_point deadline, const std::string& peer);

// Reads exactly `count` bytes, waiting until `deadline`; throws as receive_frame() does. The caller
// bounds `count` (a length the other side sent is checked before it is read).
std::string receive_exact(int fd, size_t count, Clock::time_point deadline, const std::string& peer);

// "30 s", "1.5 s", "250 ms": a duration for messages.
std::string describe(std::chrono::milliseconds duration);

}  // namespace cutrain
