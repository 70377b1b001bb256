// communicator.h: the collectives a data-parallel trainer needs, over NCCL (GPU) or Gloo (CPU).
//
//   auto comm = make_communicator(env, store, {.use_cuda = true, .compute_stream = stream});
//   comm->broadcast(params, n, /*root=*/0);            // same start on every rank
//   comm->all_reduce_async(grads, n, ReduceOp::average);  // a bucket, overlapped with backward
//   comm->wait_async();                                 // later work sees the averaged grads
//
// Design notes
// - Every communicator has a queue of its own that runs collectives in the order they were issued,
//   like a CUDA stream: NCCL's is a communication stream, Gloo's a communication thread. All ranks
//   issue the same collectives in the same order, so the queues match up across processes.
// - Ordering follows the caller's program order. On the GPU, "the caller" is the compute stream
//   given at construction: a collective starts after the work already enqueued there. The blocking
//   calls (all_reduce, broadcast, barrier) also make later compute-stream work wait for the result
//   (on the GPU without a host synchronisation; on the CPU by returning when done).
//   all_reduce_async() does not: compute carries on, and wait_async() joins the two again. On the
//   GPU, work enqueued on comm_stream() right after an all_reduce_async runs right behind that
//   collective, such as the optimizer for the bucket just averaged (Note [The step]).
// - Buffers live where the backend computes: device memory for NCCL, host memory for Gloo.
//   all_reduce_host() takes host numbers on both (metric counts at the end of an epoch).
// - Averages are sums divided by the world size (ncclAvg on NCCL).
// - Failures throw one line naming the collective. NCCL errors are also watched asynchronously;
//   an operation that makes no progress within the timeout aborts the communicator and the process
//   (as PyTorch's NCCL watchdog does), so cutrun can stop the other ranks.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "dist/launch/env.h"
#include "dist/launch/store_interface.h"

namespace cutrain {

enum class ReduceOp { sum, average };

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  // "nccl" or "gloo".
  virtual const char* backend() const = 0;

  // In-place all-reduce; later work sees the result.
  virtual void all_reduce(float* data, size_t count, ReduceOp op) = 0;
  // Overwrites `data` on every rank with root's.
  virtual void broadcast(float* data, size_t count, int root) = 0;
  // Returns once every rank has reached it (GPU: once the comm stream has passed it).
  virtual void barrier() = 0;
  // Host numbers on either backend; blocking. For counts and sums of metrics, outside the step.
  virtual void all_reduce_host(double* data, size_t count, ReduceOp op) = 0;

  // In-place all-reduce that starts after the caller's work so far and does not hold up what the
  // caller issues next. `data` must not be touched until wait_async().
  virtual void all_reduce_async(float* data, size_t count, ReduceOp op) = 0;
  // What the caller issues next waits for every all_reduce_async so far, and for the work enqueued
  // on comm_stream() (GPU: the compute stream waits on the comm stream, no host sync; CPU: returns
  // when the comm thread is idle). Rethrows a failure of any of them.
  virtual void wait_async() = 0;
  // NCCL: the stream the collectives run on, in issue order; work enqueued there runs after the
  // collectives issued so far, without holding up the compute stream. Gloo: nullptr, since its
  // collectives run on a thread.
  virtual cudaStream_t comm_stream() const { return nullptr; }
  // Watches the collectives of work that was enqueued on `stream` outside this communicator's calls,
  // a CUDA graph's replay, as its own calls' are watched (NCCL: the watchdog's timeout then covers
  // everything enqueued on `stream` so far; Gloo has nothing on streams to watch).
  virtual void watch_replay(cudaStream_t stream) {}

 protected:
  // broadcast()'s argument check: throws std::invalid_argument unless 0 <= root < world_size().
  void check_root(int root) const;
};

struct CommunicatorOptions {
  bool use_cuda = false;                  // NCCL on the current device, else Gloo on the host
  cudaStream_t compute_stream = nullptr;  // NCCL: the stream the caller's work runs on
  // NCCL: abort when a collective makes no progress for this long; Gloo: each collective's timeout.
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
  // Keys in the store are prefixed with it, so several communicators can be made from one store.
  std::string name = "default";
};

// Connects every rank of `env` (all must call it, with the same options). For NCCL the caller has
// set the rank's CUDA device (app/run_start.h). Gloo and NCCL use the interface that reaches
// MASTER_ADDR, or GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME when set (dist/launch/network_interface.h).
std::unique_ptr<Communicator> make_communicator(const DistEnv& env, Store& store, const CommunicatorOptions& options);

}  // namespace cutrain
