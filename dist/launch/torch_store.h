// torch_store.h: a client of PyTorch's c10d TCPStore, the store that torchrun's agent serves.
//
//   TorchStore store("127.0.0.1", 29500, "cutrain/group_0/", std::chrono::seconds(30));
//   store.set("rendezvous/rank/1", {});  // what PrefixStore("cutrain/group_0", store) reads
//                                         // as "rendezvous/rank/1"
//
// Note [torchrun's store]
// ~~~~~~~~~~~~~~~~~~~~~~~
// torchrun 2.x sets TORCHELASTIC_USE_AGENT_STORE=True: its agent serves a TCPStore at
// MASTER_ADDR:MASTER_PORT, and the workers are to join it as clients (a worker that listened there
// itself would find the port in use). cutrain's ranks then all meet there, rank 0 included, instead
// of at rank 0's store (dist/launch/rendezvous.h). The agent's store lives as long as the agent,
// across restarts of its workers, so every group's keys are under a prefix of its own,
// "cutrain/group_<g>/" (Note [A group's generation under torchrun] in dist/launch/rendezvous.cpp),
// as PyTorch's own workers put theirs under a PrefixStore: a restarted group never reads what an
// older group set (its ranks' arrival, its NCCL id). The agent's store
// has neither a run id nor a join; the agent, which torchrun starts for the job, is the job's.
//
// The protocol, as torch/csrc/distributed/c10d/TCPStore.cpp and TCPStoreBackend.hpp define it and
// torch 2.11 speaks it (its libuv server, the default, and the classic one alike): a request is a
// command byte and its arguments, a reply is bare. Integers are in the machine's byte order
// (little-endian, as on every machine PyTorch runs on); a key or a value is a uint64 length and
// its bytes. PyTorch's clients send every key with a '/' in front (TCPStore's keyPrefix_), under
// the prefixes of any PrefixStore ("cutrain/group_0" + "/" + key): "/cutrain/group_0/rendezvous/rank/1".
//   VALIDATE (0)     u32 0x3C85F7CE             -> nothing (another number: closed or ignored)
//   PING (13)        u32 nonce                  -> u32 the same nonce
//   SET (1)          key, value                 -> nothing
//   COMPARE_SET (2)  key, expected, desired     -> value: what the key holds after (desired where it held
//                                                  expected, or was missing and expected is empty; a missing
//                                                  key with another expected answers expected, and stays missing)
//   GET (3)          key                        -> value (the key must exist: wait first)
//   ADD (4)          key, i64 delta             -> i64 the sum (kept as decimal text)
//   CHECK (5)        u64 n, n keys              -> u8 0 all exist | 1 not yet
//   WAIT (6)         u64 n, n keys              -> u8 0 once all exist
//   MULTI_GET (10)   u64 n, n keys              -> n values (every key must exist: wait first)
//   CANCEL_WAIT (12)                            -> u8 1 (after the 0 of a wait that ended meanwhile)
// A connection validates, then pings; a server that gets anything else first closes it. The
// protocol has no version number: the magic number and the ping are all there is to check, and a
// server that fails them is described by what it answered.
//
// Bounded like cutrain's own store (dist/launch/store.h): no request or value over kMaxFrameBytes (1 MiB),
// every reply awaited for the store's timeout at most (a wait for its own timeout and a grace),
// and one line naming the store for one that answers garbage, closes, or never answers.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "dist/launch/socket.h"
#include "dist/launch/store_interface.h"

namespace cutrain {

class TorchStore : public Store {
 public:
  // Connects to the TCPStore at host:port (retrying while nobody listens yet, until `timeout`,
  // calling `on_retry` after each failed attempt), validates and pings. Every key is `prefix` + key
  // for PyTorch's clients, "/" + `prefix` + key on the wire.
  // `timeout` is also the default for get() and wait() and the limit for any reply.
  TorchStore(const std::string& host, int port, const std::string& prefix, std::chrono::milliseconds timeout,
             const ConnectRetry& on_retry = {});
  ~TorchStore();
  TorchStore(const TorchStore&) = delete;
  TorchStore& operator=(const TorchStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  using Store::get;
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  // One WAIT and one MULTI_GET, where Store's get_all asks for each key in turn.
  std::vector<std::vector<char>> get_all(const std::vector<std::string>& keys) override;
  // COMPARE_SET: sets `key` to `desired` where it holds `expected` (where it is missing, for an empty
  // `expected`), and returns what it holds then, so that the caller that sees its own `desired` knows it won.
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired);
  // From now on every key is under `prefix` (Note [A group's generation under torchrun] in
  // dist/launch/rendezvous.cpp).
  void set_prefix(const std::string& prefix);
  std::vector<std::string> wait_for(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  std::chrono::milliseconds timeout() const override { return timeout_; }
  const std::string& address() const override { return address_; }

 private:
  void handshake();
  // WAIT for the prefixed keys; false when `timeout` passed first (the wait is then cancelled).
  bool wait_prefixed(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // CHECK of prefixed keys: whether every one exists.
  bool check_prefixed(const std::vector<std::string>& keys);
  void send(const std::string& request);
  // Exactly `count` bytes of the reply to `command`, within the store's timeout.
  std::string receive(size_t count, const char* command);
  std::string receive_value(const char* command);
  uint8_t receive_byte(const char* command);
  // The error for a reply that is not one ("GET with a value of ... bytes"); the connection is
  // given up, as after a reply that never came, since what follows on it cannot be read.
  std::runtime_error garbled(const std::string& answer);

  std::string prefix_;
  std::string address_;
  std::chrono::milliseconds timeout_;
  int socket_ = -1;
  bool broken_ = false;  // a reply was lost or garbled: no request is sent any more
  std::mutex mutex_;     // one request at a time on the connection
};

}  // namespace cutrain
