// socket.h: the few TCP calls the store needs, with deadlines and one-line errors.
//
// A message on the wire is a frame of fields, every length a little-endian uint32:
//   [frame length][field 0 length][field 0 bytes][field 1 length][field 1 bytes]...
// The store's requests and replies are such frames (dist/store_server.h lists them).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cutrain {

using Clock = std::chrono::steady_clock;
using Fields = std::vector<std::string>;

// A listening IPv4 socket on all interfaces (or only loopback when `loopback_only`) at `port`
// (0: any free port). A port in use throws "MASTER_PORT 29500 on <host> is in use ...".
int listen_tcp(const std::string& host, int port, bool loopback_only);

// The port a bound socket listens on.
int socket_port(int fd);

// Called after each failed attempt while connect_tcp retries, with the reason ("Connection refused").
using ConnectRetry = std::function<void(const std::string& reason)>;

// Connects to host:port, retrying while nobody listens yet (or the host does not answer), for
// `timeout`; then throws naming the address and the last reason. Unknown hosts throw at once.
int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout,
                const ConnectRetry& on_retry = {});

// The IP address of this machine's interface that routes to host:port ("127.0.0.1" for loopback);
// dist/interface.h finds the interface's name. Sends nothing.
std::string local_address_toward(const std::string& host, int port);

std::string encode_frame(const Fields& fields);

// Removes and returns the first complete frame at the front of `buffer`, if there is one. Throws on
// a frame that cannot be one of ours (too large, fields overrunning it).
std::optional<Fields> pop_frame(std::string& buffer);

void send_all(int fd, const std::string& bytes);

// Reads one frame, waiting until `deadline`. Throws on timeout or a closed connection, naming `peer`.
Fields receive_frame(int fd, Clock::time_point deadline, const std::string& peer);

// "30 s", "1.5 s", "250 ms": a duration for messages.
std::string describe(std::chrono::milliseconds duration);

}  // namespace cutrain
