// store_interface.h: what the job asks of its meeting point, whichever store serves it.
//
// Two stores implement it: cutrain's own (dist/launch/store.h: rank 0 serves it, under cutrun, srun or
// plain environment variables) and PyTorch's TCPStore of torchrun's agent (dist/launch/torch_store.h:
// Note [torchrun's store]). The rendezvous, the communicators and the trainer see only this.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cutrain {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::vector<char>& value) = 0;

  // The value of `key`, waiting until some rank sets it; after `timeout` throws
  // "store: key 'nccl/id' was not set within 30 s".
  std::vector<char> get(const std::string& key) { return get(key, timeout()); }
  virtual std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  // The values of `keys`, in their order, once every one is set (waiting as wait() does).
  virtual std::vector<std::vector<char>> get_all(const std::vector<std::string>& keys);

  // Adds `delta` to the integer at `key` (0 when missing) and returns the new value. The value is
  // kept as decimal text, so get() of the key reads "3".
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Waits until every key exists; returns the keys still missing when `timeout` passed, or when
  // the store closed first (empty when all arrived in time).
  virtual std::vector<std::string> wait_for(const std::vector<std::string>& keys,
                                            std::chrono::milliseconds timeout) = 0;

  // wait_for() with the store's timeout that throws naming the missing keys.
  void wait(const std::vector<std::string>& keys);

  // The default for get() and wait().
  virtual std::chrono::milliseconds timeout() const = 0;
  // "127.0.0.1:29500" or "[::1]:29500": where the store is, for messages.
  virtual const std::string& address() const = 0;
};

}  // namespace cutrain
