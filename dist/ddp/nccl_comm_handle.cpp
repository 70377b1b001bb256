#include "dist/ddp/nccl_comm_handle.h"

#include "dist/ddp/nccl_check.h"

namespace cutrain {

NcclCommHandle::State NcclCommHandle::state() const {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  return state_;
}

bool NcclCommHandle::query(const std::function<void(ncclComm_t)>& query) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (state_ != State::live) return false;
  query(comm_);
  return true;
}

void NcclCommHandle::abort() {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (state_ != State::live) return;
  state_ = State::aborted;  // first: whatever abort returns, the handle is gone
  calls_.abort(comm_);
}

void NcclCommHandle::close(const std::function<void(ncclResult_t)>& settle) {
  std::lock_guard<std::recursive_mutex> lock(mutex_);
  if (state_ != State::live) return;
  settle(calls_.finalize(comm_));
  if (state_ != State::live) return;
  state_ = State::closed;
  NCCL_CHECK(calls_.destroy(comm_));
}

}  // namespace cutrain
