// nccl_communicator.h: the Communicator for device buffers, over NCCL.
//
// Collectives run on a communication stream of the communicator's own, with high priority so
// that they are scheduled as soon as their inputs are ready. Two events tie it to the caller's
// compute stream. compute_ready_ is recorded on the compute stream, and the comm stream waits for
// it before a collective, which therefore starts after the compute work issued before it.
// comm_done_ is recorded on the comm stream where the caller needs the results (the blocking calls
// and wait_async()), and the compute stream waits for it: for every collective issued so far and
// whatever the caller enqueued on comm_stream() after them.
//
// Nothing synchronises with the host except barrier() and all_reduce_host(), whose results are
// on the host by nature, so the step's calls can be captured in a CUDA graph. The capture must be
// in cudaStreamCaptureModeThreadLocal, because the watchdog thread below keeps querying an event
// meanwhile, which the global mode forbids. The watchdog queries an event of its own, watched_,
// which only collectives issued outside a capture record, since querying an event recorded into
// a capture under way invalidates that capture. A graph's replay is watched through
// watch_replay(), which records the same event on the replay's stream after it.
//
// The communicator is created non-blocking (ncclConfig_t::blocking = 0), so that a peer that
// never comes cannot hang initialisation past the timeout. A watchdog thread polls
// ncclCommGetAsyncError and the age of the last collective still running. On an error, or when
// there is no progress for the timeout, it aborts the communicator (ncclCommAbort) and ends the
// process with a one-line message, as PyTorch's NCCL watchdog does, so that cutrun can stop the
// other ranks.
#pragma once

#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dist/ddp/communicator.h"
#include "dist/ddp/nccl_comm_handle.h"

namespace cutrain {

class NcclCommunicator final : public Communicator {
 public:
  // The caller has chosen the device (cudaSetDevice(LOCAL_RANK)).
  NcclCommunicator(const DistEnv& env, Store& store, const CommunicatorOptions& options);
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  const char* backend() const override { return "nccl"; }

  void all_reduce(float* data, size_t count, ReduceOp op) override;
  void broadcast(float* data, size_t count, int root) override;
  void barrier() override;
  void all_reduce_host(double* data, size_t count, ReduceOp op) override;
  void all_reduce_async(float* data, size_t count, ReduceOp op) override;
  void wait_async() override;
  cudaStream_t comm_stream() const override { return comm_stream_; }
  void watch_replay(cudaStream_t stream) override;

 private:
  // Waits out a non-blocking call's ncclInProgress. Throws naming `call` if the call failed or
  // took longer than the timeout, in which case the communicator is aborted and comm_ allows no
  // more calls.
  void settle(ncclResult_t result, const char* call);
  void start_after_compute();     // the comm stream waits for the compute stream's work so far
  void mark_issued();             // has the watchdog watch the collective just enqueued
  void compute_waits_for_comm();  // the compute stream waits for the comm stream's work so far
  void watch();                   // the watchdog thread
  void release_cuda() noexcept;   // the stream, events and buffers, as far as they exist

  int rank_ = 0;
  int world_size_ = 1;
  int device_ = 0;
  std::chrono::milliseconds timeout_;
  NcclCommHandle comm_;
  cudaStream_t compute_stream_ = nullptr;
  cudaStream_t comm_stream_ = nullptr;
  cudaEvent_t compute_ready_ = nullptr;
  cudaEvent_t comm_done_ = nullptr;
  cudaEvent_t watched_ = nullptr;  // the watchdog's, after each collective; never recorded into a capture
  float* scratch_ = nullptr;       // barrier()'s one float
  double* host_values_ = nullptr;  // all_reduce_host()'s device copy
  size_t host_values_capacity_ = 0;

  // When watched_ was last recorded, in steady-clock nanoseconds; the watchdog's clock.
  std::atomic<int64_t> last_issue_ns_{0};
  std::mutex watchdog_mutex_;
  std::condition_variable watchdog_stop_;
  bool stopping_ = false;
  std::thread watchdog_;
};

}  // namespace cutrain
