// store_server.h: rank 0's side of the TcpStore (dist/store.h), one thread serving every rank.
//
// Requests and replies are frames of fields (dist/socket.h). A request is
//   [op, run id, arguments...]
// with the ops
//   "join"  rank, world size        -> "ok"                refused: other world size, rank seen before
//   "set"   key, value              -> "ok"
//   "get"   timeout ms, key         -> "ok", value     |  "timeout", key
//   "add"   key, delta              -> "ok", new value (decimal text)
//   "wait"  timeout ms, keys...     -> "ok"            |  "timeout", missing keys...
// and any request of another run id, or a malformed one, gets "error", why. A get or wait still
// waiting when the server stops gets "closed", missing keys.
//
// One thread polls the listening socket and every connection. A get or wait whose keys are not all
// there is parked as a waiter and answered by the set or add that completes it, or by its deadline.
#pragma once

#include <string>
#include <thread>

namespace cutrain {

class StoreServer {
 public:
  // Listens at `port` (0: a free one) on all interfaces, or on loopback only; throws when the
  // port is in use. `host` names the address in messages.
  StoreServer(const std::string& host, int port, bool loopback_only, std::string run_id, int world_size);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  int port() const { return port_; }

 private:
  void serve();

  int listen_socket_ = -1;
  int stop_pipe_[2] = {-1, -1};  // the destructor writes a byte to end serve()
  int port_ = 0;
  std::string run_id_;
  int world_size_ = 1;
  std::thread thread_;
};

}  // namespace cutrain
