// store_server.h: rank 0's side of the TcpStore (dist/launch/store.h), one thread that serves every
// connection and never waits on any one of them.
//
// The messages are in dist/launch/store_protocol.h, the rules (run id, join first, ...) in
// dist/launch/store_state.h; this file does the sockets, so that no client can hurt the others:
// - Every socket is non-blocking, and each connection has its own input and output buffers;
//   poll() wakes the thread for whichever connection is ready.
// - One request at a time per connection: while its reply waits to be sent, or its get or wait is
//   parked, nothing more is read from it. A client that sends without reading stalls only itself
//   (the kernel's socket buffer holds what it sends).
// - Input is kept only as it arrives, and never more than one frame of at most 1 MiB: a length
//   prefix over that is refused at once. Before its join a connection may send only 4 KiB.
// - Time limits: a connection must join within `join_within`, a request must arrive whole within
//   `request_within` of its first byte, a reply must be taken within `reply_within`.
// - At most world size + `spare_connections` connections, and at most world size that have not
//   joined from any one address. One more takes the place of an unjoined connection: of its own
//   address when that is at its bound, else of the address with the most. Joined connections, and
//   those whose join has arrived, are never the ones closed (Note [Room for ranks]).
// A connection that breaks a rule hears why (when it is a protocol error) and is closed. A join from
// a newer restart ends the process at once, with one line on stderr and exit status 1 (Note [A newer
// group ends an older one] in dist/launch/store_state.h). Stopping
// the server sends "closed" to parked requests, as far as each socket takes it without waiting,
// and shuts every connection down.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace cutrain {

struct StoreLimits {
  std::chrono::milliseconds join_within = std::chrono::seconds(10);
  std::chrono::milliseconds request_within = std::chrono::seconds(10);
  std::chrono::milliseconds reply_within = std::chrono::seconds(10);
  int spare_connections = 64;
};

class StoreServer {
 public:
  // Listens at `host`:`port` (0: a free port) and only there, for a group of `world_size` ranks
  // started at `restart_count` (TORCHELASTIC_RESTART_COUNT); throws when the port is in use or
  // `host` is not an address of this machine.
  StoreServer(const std::string& host, int port, std::string run_id, int world_size, int64_t restart_count,
              StoreLimits limits = {});
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }
  bool on_loopback() const;  // listens where other machines cannot reach it

 private:
  void serve();

  int listen_socket_ = -1;
  int stop_pipe_[2] = {-1, -1};  // the destructor writes a byte to end serve()
  int port_ = 0;
  std::string run_id_;
  int world_size_ = 1;
  int64_t restart_count_ = 0;
  StoreLimits limits_;
  std::thread thread_;
};

}  // namespace cutrain
