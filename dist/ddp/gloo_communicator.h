// gloo_communicator.h: the Communicator for host buffers, over Gloo's TCP transport.
//
// Gloo's collectives block the calling thread, so this communicator runs them on a thread of its
// own, the CPU's "communication stream": the caller enqueues (all_reduce_async) and carries on with
// backward; wait_async() waits until the queue is empty. The blocking calls enqueue and wait too,
// so every collective runs in issue order, the same on every rank, each with the next tag.
//
// Gloo finds its peers through our store (an adapter to gloo::rendezvous::Store) and connects a
// full mesh of TCP pairs.
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/ddp/communicator.h"

namespace gloo {
class Context;
}

namespace cutrain {

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const DistEnv& env, Store& store, const CommunicatorOptions& options);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend() const override { return "gloo"; }

  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void broadcast(float* data, size_t count, int root) override;
  void barrier() override;
  void all_reduce_host(double* data, size_t count, ReduceOp op) override;
  void all_reduce_async(float* data, size_t count, ReduceOp op) override;
  void wait_async() override;

 private:
  // One collective waiting for the communication thread.
  struct Task {
    enum Kind { all_reduce_float, all_reduce_double, broadcast_float, barrier } kind;
    void* data = nullptr;
    size_t count = 0;
    ReduceOp op = ReduceOp::sum;
    int root = 0;
    uint32_t tag = 0;
  };

  void enqueue(Task task);
  void run(const Task& task);  // on the communication thread
  void work();                 // the communication thread

  int rank_ = 0;
  int world_size_ = 1;
  std::shared_ptr<gloo::Context> context_;
  uint32_t next_tag_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Task> queue_;
  bool running_task_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;  // the first failure, rethrown by wait_async()
  std::thread thread_;
};

}  // namespace cutrain
