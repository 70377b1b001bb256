// store.h: the job's meeting point, a small TCP key-value store like PyTorch's c10d TCPStore.
//
// Rank 0 serves it from a thread at MASTER_ADDR:MASTER_PORT; every rank, rank 0 included, is a
// client. It carries the few bytes the processes must agree on before they can talk directly:
// NCCL's unique id, Gloo's addresses, and who has arrived.
//
//   TcpStore store(env);          // rank 0 starts the server; every rank joins it
//                                 // (dist/launch/rendezvous.h does this, then waits for every rank)
//   store.set("nccl/id", bytes);  // rank 0
//   auto id = store.get("nccl/id");  // others: waits until rank 0 has set it
//
// Design notes
// - get() and wait() block in the SERVER until the key exists or the deadline passes; the client
//   never polls and never sleeps a fixed time. Only connecting retries, until the timeout, since
//   rank 0 may start after the others.
// - Every request carries the launcher's run id (CUTRAIN_RUN_ID); the server refuses requests of
//   another run without naming either id, so a leftover process from an earlier job cannot join
//   this one, and the id cutrun draws at random serves as the job's secret. A connection must
//   join (run id, WORLD_SIZE, a new RANK below it, TORCHELASTIC_RESTART_COUNT) before anything
//   else. dist/launch/store_state.h has the rules, dist/launch/store_server.h how one client is kept from
//   stalling the others.
// - The server listens at MASTER_ADDR only (cutrun --standalone: loopback), or at
//   CUTRAIN_STORE_BIND (cutrun --store-bind) when set; IPv4 or IPv6.
// - Errors are one line naming what is wrong: the port in use, the key that never came, the ranks
//   that never arrived.
// - A job of one process (WORLD_SIZE=1) serves its store on a free loopback port: nobody else has to
//   find it, and two single-process runs never collide on MASTER_PORT.
// - Keep the store alive as long as the communicators made through it.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "dist/launch/env.h"
#include "dist/launch/socket.h"
#include "dist/launch/store_interface.h"

namespace cutrain {

class StoreServer;  // dist/launch/store_server.h: rank 0's thread

class TcpStore : public Store {
 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(5);

  // Rank 0 first starts the server. Then every rank connects (retrying until `timeout`, calling
  // `on_retry` after each failed attempt) and joins: the server checks the run id, the world size
  // and that the rank is new. A connection closed before its join is answered (the server made
  // room for others, dist/launch/store_server.h), or a join answered "retry" (the store's group is older
  // than this rank's, Note [A newer group ends an older one] in dist/launch/store_state.h), is made again,
  // within the same `timeout`. `timeout` is also the default for get() and wait(). MASTER_PORT 0
  // lets rank 0 pick a free port (see port()).
  explicit TcpStore(const DistEnv& env, std::chrono::milliseconds timeout = kDefaultTimeout,
                    const ConnectRetry& on_retry = {});
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  using Store::get;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // Also returns early, with the keys still missing, when rank 0's store closed.
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  std::chrono::milliseconds timeout() const override { return timeout_; }
  const std::string& address() const override { return address_; }
  // The server's port: MASTER_PORT, or the free port chosen when that was 0 (or the world is one).
  int port() const { return port_; }

 private:
  // Connects and joins, again when the store drops the connection before answering or asks to retry.
  void join(const DistEnv& env, const std::string& host, const ConnectRetry& on_retry);

  // Sends one request and returns the reply's fields; throws on a refused request, or when no reply
  // came within the server's timeout for it and a grace.
  std::vector<std::string> request(const std::string& op, const std::vector<std::string>& args,
                                   std::chrono::milliseconds server_timeout);

  std::unique_ptr<StoreServer> server_;  // rank 0 only
  std::string run_id_;
  std::string address_;
  int port_ = 0;
  std::chrono::milliseconds timeout_;
  int socket_ = -1;
  std::mutex mutex_;  // one request at a time on the connection
};

}  // namespace cutrain
