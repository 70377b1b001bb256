#include "dist/ddp/nccl_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "dist/ddp/nccl_check.h"
#include "dist/launch/network_interface.h"
#include "dist/launch/progress_report.h"
#include "dist/launch/socket.h"

namespace cutrain {
namespace {

// How often the watchdog looks at the communicator. This is often enough to abort soon after a
// failure, and seldom enough to cost nothing.
constexpr auto kWatchdogPeriod = std::chrono::milliseconds(500);

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

ncclRedOp_t nccl_op(ReduceOp op) { return op == ReduceOp::average ? ncclAvg : ncclSum; }

// ncclUniqueId travels through the store as its raw bytes.
ncclUniqueId exchange_unique_id(const DistEnv& env, Store& store, const std::string& name) {
  const std::string key = "nccl/" + name + "/unique_id";
  ncclUniqueId id{};
  if (env.rank == 0) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    store.set(key, std::vector<char>(id.internal, id.internal + sizeof id.internal));
  } else {
    std::vector<char> bytes = store.get(key);
    if (bytes.size() != sizeof id.internal)
      throw std::runtime_error("store: '" + key + "' holds " + std::to_string(bytes.size()) +
                               " bytes, not an ncclUniqueId");
    std::memcpy(id.internal, bytes.data(), sizeof id.internal);
  }
  return id;
}

}  // namespace

NcclCommunicator::NcclCommunicator(const DistEnv& env, Store& store, const CommunicatorOptions& options)
    : rank_(env.rank), world_size_(env.world_size), timeout_(options.timeout), compute_stream_(options.compute_stream) {
  try {
    CUDA_CHECK(cudaGetDevice(&device_));
    int least = 0, greatest = 0;
    CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    CUDA_CHECK(cudaStreamCreateWithPriority(&comm_stream_, cudaStreamNonBlocking, greatest));
    CUDA_CHECK(cudaEventCreateWithFlags(&compute_ready_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&watched_, cudaEventDisableTiming));
    CUDA_CHECK(cudaMalloc(&scratch_, sizeof(float)));

    use_route_for_nccl(env);  // before NCCL first looks at NCCL_SOCKET_IFNAME
    ncclUniqueId id = exchange_unique_id(env, store, options.name);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    settle(ncclCommInitRankConfig(comm_.init_target(), world_size_, id, rank_, &config), "ncclCommInitRankConfig");
  } catch (...) {
    // A constructor that throws gets no destructor, so this frees what was made. A communicator
    // that NCCL made but that failed or timed out is aborted (settle() has already done so on a
    // timeout).
    if (static_cast<ncclComm_t>(comm_) != nullptr) comm_.abort();
    release_cuda();
    throw;
  }
  last_issue_ns_ = now_ns();
  watchdog_ = std::thread([this] { watch(); });
}

NcclCommunicator::~NcclCommunicator() {
  {
    std::lock_guard<std::mutex> lock(watchdog_mutex_);
    stopping_ = true;
  }
  watchdog_stop_.notify_all();
  watchdog_.join();
  // A destructor must not throw, so this reports what fails and frees the rest. A communicator
  // that an earlier call aborted is gone already, and close() then calls nothing.
  try {
    CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
    comm_.close([this](ncclResult_t result) { settle(result, "ncclCommFinalize"); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cutrain: warning: closing the NCCL communicator: %s\n", e.what());
  }
  release_cuda();
}

// Frees what exists and ignores errors, since nothing can be done about them here.
void NcclCommunicator::release_cuda() noexcept {
  if (host_values_) cudaFree(host_values_);
  if (scratch_) cudaFree(scratch_);
  if (watched_) cudaEventDestroy(watched_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (compute_ready_) cudaEventDestroy(compute_ready_);
  if (comm_stream_) cudaStreamDestroy(comm_stream_);
}

void NcclCommunicator::settle(ncclResult_t result, const char* call) {
  auto deadline = Clock::now() + timeout_;
  while (result == ncclInProgress) {
    if (Clock::now() > deadline) {
      comm_.abort();
      throw std::runtime_error(std::string(call) + " on rank " + std::to_string(rank_) + " did not complete within " +
                               describe(timeout_) + "; NCCL communicator aborted");
    }
    std::this_thread::yield();
    ncclResult_t state = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &state));
    result = state;
  }
  if (result != ncclSuccess)
    throw CheckError(std::string(call) + " failed on rank " + std::to_string(rank_) + ": " + nccl_error_string(result) +
                     (comm_ != nullptr ? std::string(": ") + ncclGetLastError(comm_) : std::string()));
}

void NcclCommunicator::start_after_compute() {
  CUDA_CHECK(cudaEventRecord(compute_ready_, compute_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(comm_stream_, compute_ready_, 0));
}

void NcclCommunicator::mark_issued() {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(comm_stream_, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // not watched, as the header says
  // The time comes first and then the event, so a watchdog that sees the new event also sees the
  // new time.
  last_issue_ns_ = now_ns();
  CUDA_CHECK(cudaEventRecord(watched_, comm_stream_));
}

void NcclCommunicator::watch_replay(cudaStream_t stream) {
  last_issue_ns_ = now_ns();  // the time first, as in mark_issued()
  CUDA_CHECK(cudaEventRecord(watched_, stream));
}

void NcclCommunicator::compute_waits_for_comm() {
  CUDA_CHECK(cudaEventRecord(comm_done_, comm_stream_));
  CUDA_CHECK(cudaStreamWaitEvent(compute_stream_, comm_done_, 0));
}

void NcclCommunicator::all_reduce_async(float* data, size_t count, ReduceOp op) {
  start_after_compute();
  settle(ncclAllReduce(data, data, count, ncclFloat, nccl_op(op), comm_, comm_stream_), "ncclAllReduce");
  mark_issued();
}

void NcclCommunicator::wait_async() { compute_waits_for_comm(); }

void NcclCommunicator::all_reduce(float* data, size_t count, ReduceOp op) {
  all_reduce_async(data, count, op);
  compute_waits_for_comm();
}

void NcclCommunicator::broadcast(float* data, size_t count, int root) {
  check_root(root);
  start_after_compute();
  settle(ncclBroadcast(data, data, count, ncclFloat, root, comm_, comm_stream_), "ncclBroadcast");
  mark_issued();
  compute_waits_for_comm();
}

void NcclCommunicator::barrier() {
  // NCCL has no barrier, so this is an all-reduce of one float that every rank must join, waited
  // for.
  start_after_compute();
  settle(ncclAllReduce(scratch_, scratch_, 1, ncclFloat, ncclSum, comm_, comm_stream_), "ncclAllReduce (barrier)");
  mark_issued();
  CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
}

void NcclCommunicator::all_reduce_host(double* data, size_t count, ReduceOp op) {
  if (count > host_values_capacity_) {  // grows to the largest count asked for, never in a step
    CUDA_CHECK(cudaFree(host_values_));
    host_values_ = nullptr;
    CUDA_CHECK(cudaMalloc(&host_values_, count * sizeof(double)));
    host_values_capacity_ = count;
  }
  start_after_compute();
  CUDA_CHECK(cudaMemcpyAsync(host_values_, data, count * sizeof(double), cudaMemcpyHostToDevice, comm_stream_));
  settle(ncclAllReduce(host_values_, host_values_, count, ncclDouble, nccl_op(op), comm_, comm_stream_),
         "ncclAllReduce (host values)");
  mark_issued();
  CUDA_CHECK(cudaMemcpyAsync(data, host_values_, count * sizeof(double), cudaMemcpyDeviceToHost, comm_stream_));
  CUDA_CHECK(cudaStreamSynchronize(comm_stream_));
}

void NcclCommunicator::watch() {
  // Events belong to a device; this thread asks about them on the same one.
  if (cudaSetDevice(device_) != cudaSuccess) return;
  const int64_t timeout_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(timeout_).count();
  std::unique_lock<std::mutex> lock(watchdog_mutex_);
  // While a collective is unfinished, this rank waits for its peers (Note [A heartbeat means
  // progress] in dist/launch/progress_report.h), whatever its host thread waits for meanwhile.
  std::optional<WaitingOnPeers> in_flight;
  while (!watchdog_stop_.wait_for(lock, kWatchdogPeriod, [this] { return stopping_; })) {
    std::string failure;
    const bool live = comm_.query([&](ncclComm_t comm) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) == ncclSuccess && state != ncclSuccess && state != ncclInProgress)
        failure = "NCCL reported " + nccl_error_string(state) + ": " + ncclGetLastError(comm);
    });
    if (!live) return;  // a call of the owner aborted it, so nothing is left to watch
    const bool unfinished = cudaEventQuery(watched_) == cudaErrorNotReady;
    if (unfinished && !in_flight) in_flight.emplace();
    if (!unfinished) in_flight.reset();
    if (failure.empty() && unfinished && now_ns() - last_issue_ns_ > timeout_ns) {
      // The event comes first and the time second (as in mark_issued), so an unfinished event with
      // an old time is a collective that has truly been running for longer than the timeout.
      failure = "a collective made no progress for " + describe(timeout_) + " (a rank died or hangs?)";
    }
    if (failure.empty()) continue;
    std::fprintf(stderr, "cutrain: error: rank %d: %s; aborting the NCCL communicator\n", rank_, failure.c_str());
    std::fflush(stderr);
    comm_.abort();
    std::_Exit(1);
  }
}

}  // namespace cutrain
