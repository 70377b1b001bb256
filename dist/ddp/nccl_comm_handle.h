// nccl_comm_handle.h: an NCCL communicator handle, and which calls it still allows.
//
// ncclCommAbort frees the communicator. After an abort nothing may pass the handle to NCCL
// again: not the watchdog thread's polling, not the ncclCommFinalize and ncclCommDestroy that
// close it. So the handle keeps a state:
//
//   live     collectives, queries, abort(), close()
//   aborted  nothing: query() skips its function, abort() and close() do nothing
//   closed   nothing (finalized and destroyed)
//
// An abort may come from the owner's thread (a call that did not complete in time) or from the
// watchdog thread (a collective that hangs); a mutex orders it against the watchdog's queries.
// NCCL's three lifetime calls come in through NcclLifetimeCalls, so tests can stand in for NCCL
// on a machine without a GPU.
#pragma once

#include <nccl.h>

#include <functional>
#include <mutex>

namespace cutrain {

struct NcclLifetimeCalls {
  ncclResult_t (*abort)(ncclComm_t) = ncclCommAbort;
  ncclResult_t (*finalize)(ncclComm_t) = ncclCommFinalize;
  ncclResult_t (*destroy)(ncclComm_t) = ncclCommDestroy;
};

class NcclCommHandle {
 public:
  enum class State { live, aborted, closed };

  explicit NcclCommHandle(NcclLifetimeCalls calls = {}) : calls_(calls) {}
  NcclCommHandle(const NcclCommHandle&) = delete;
  NcclCommHandle& operator=(const NcclCommHandle&) = delete;

  // Where ncclCommInitRankConfig writes the new communicator.
  ncclComm_t* init_target() { return &comm_; }
  // The communicator, for the owner's own NCCL calls while it is live.
  operator ncclComm_t() const { return comm_; }
  State state() const;

  // Runs query(comm) while the communicator is live and keeps it live meanwhile; false if it is not.
  bool query(const std::function<void(ncclComm_t)>& query);
  // Frees the communicator with ncclCommAbort if it is live; a no-op otherwise.
  void abort();
  // Finalizes and destroys a live communicator: ncclCommFinalize, then `settle` to wait out its
  // non-blocking completion (it may abort() and throw; then nothing more is called), then
  // ncclCommDestroy (throwing CheckError if it fails). A no-op unless live.
  void close(const std::function<void(ncclResult_t finalize_result)>& settle);

 private:
  NcclLifetimeCalls calls_;
  ncclComm_t comm_ = nullptr;
  mutable std::recursive_mutex mutex_;  // settle() inside close() may abort()
  State state_ = State::live;
};

}  // namespace cutrain
