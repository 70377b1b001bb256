// runtime.cpp: the emulated CUDA runtime of runtime.h: errors, the device, memory, streams and
// events. The scheduling of deferred work is stream_scheduler.cpp's, graphs are graph.cpp's.
#include "emu/runtime.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "emu/block.h"
#include "emu/environment.h"
#include "emu/recording.h"
#include "emu/stream_scheduler.h"

namespace cutrain::emu {

namespace {

thread_local cudaError_t last_error = cudaSuccess;

// What the last cudaErrorLaunchFailure was, for cudaGetErrorString: set by whichever thread
// reports it, read by any.
struct Failure {
  std::mutex mutex;
  std::string why;
};
Failure& last_failure() {
  static Failure& f = *new Failure;
  return f;
}

cudaError_t fail(cudaError_t error) { return set_last_error(error); }

// What was allocated: device buffers and pinned host buffers by start address, with their sizes,
// and the kernels' shared memory limits. Never destroyed: the device thread reads it until exit.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device;
  std::map<uintptr_t, size_t> unbacked;          // of those, the record-only device's (Note [Record-only device])
  uintptr_t next_unbacked = uintptr_t(1) << 44;  // far from anything real, for a reader of a dump
  std::map<uintptr_t, size_t> pinned;
  std::map<const void*, size_t> max_dynamic_shared;  // kernels given cudaFuncAttributeMaxDynamicSharedMemorySize
};

Registry& registry() {
  static Registry& r = *new Registry;
  return r;
}

// Whether [p, p + bytes) lies in one allocation of `allocations`; `touches` whether p is in one.
struct Range {
  bool inside = false, touches = false;
};

Range range_in(const std::map<uintptr_t, size_t>& allocations, const void* p, size_t bytes) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  auto it = allocations.upper_bound(address);
  if (it == allocations.begin()) return {};
  it = std::prev(it);
  const uintptr_t end = it->first + it->second;
  if (address >= end) return {};
  return {address + bytes <= end, true};
}

Range device_range(const void* p, size_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return range_in(r.device, p, bytes);
}

bool pinned(const void* p, size_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return range_in(r.pinned, p, bytes).inside;
}

// The copy direction `kind` asks for must be the one the pointers have.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const Range d = device_range(dst, bytes), s = device_range(src, bytes);
  bool dst_device = d.touches, src_device = s.touches;
  switch (kind) {
    case cudaMemcpyHostToHost: dst_device = src_device = false; break;
    case cudaMemcpyHostToDevice:
      if (src_device || !dst_device) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDeviceToHost:
      if (!src_device || dst_device) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDeviceToDevice:
      if (!src_device || !dst_device) return cudaErrorInvalidValue;
      break;
    case cudaMemcpyDefault: break;
    default: return cudaErrorInvalidMemcpyDirection;
  }
  if ((dst_device && !d.inside) || (src_device && !s.inside)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

std::atomic<long long> grids{0}, memsets{0}, copies{0};  // what work_done() says

std::function<bool()> kernel_step(const KernelLaunch& k) {
  return [k] {
    const std::string failure = run_grid(k.grid);
    if (!failure.empty()) {
      auto lock = lock_device();
      defer_error(cudaErrorLaunchFailure, failure);
    }
    return true;
  };
}

// Set while a RunWhileRecording is alive on this thread.
thread_local bool run_while_recording = false;

// The device records and runs nothing while a recorder plans (Note [Record-only device]).
bool record_only() { return recording() && !run_while_recording; }

}  // namespace

const EmulatedDevice& emulated_device() { return record_only() ? kRecordOnlyDevice : kDevice; }

RunWhileRecording::RunWhileRecording() : previous_(run_while_recording) { run_while_recording = true; }
RunWhileRecording::~RunWhileRecording() { run_while_recording = previous_; }

bool record_instead(cutrain::RecordedOp op) { return cutrain::record(std::move(op)) && !run_while_recording; }

bool valid_stream(cudaStream_t stream) {
  auto lock = lock_device();
  return find_stream(stream) != nullptr;
}

WorkDone work_done() { return {grids.load(), memsets.load(), copies.load()}; }

size_t max_dynamic_shared_bytes(const void* kernel) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.max_dynamic_shared.find(kernel);
  return it == r.max_dynamic_shared.end() ? emulated_device().shared_per_block : it->second;
}

cudaError_t set_last_error(cudaError_t error, const char* why) {
  if (error == cudaErrorLaunchFailure) {
    std::lock_guard lock(last_failure().mutex);
    last_failure().why = why;
  }
  last_error = error;
  return error;
}

std::optional<Allocation> allocation_of(const void* p) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  auto it = r.device.upper_bound(address);
  if (it == r.device.begin()) return std::nullopt;
  it = std::prev(it);
  if (address >= it->first + it->second) return std::nullopt;
  return Allocation{reinterpret_cast<const void*>(it->first), it->second};
}

bool inside_device_allocation(const void* p, size_t bytes) { return device_range(p, bytes).inside; }

namespace {

// Enqueues `step` on `stream` after the capture rules' check; the error is the last error too.
cudaError_t enqueue_step(cudaStream_t stream, const char* name, std::function<bool()> step, cudaGraphNodeType type,
                         const KernelLaunch* kernel = nullptr) {
  auto lock = lock_device();
  CUstream_st* s = find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = capture_check(Use::enqueue, s)) return fail(error);
  if (!record_only()) enqueue_op(lock, s, name, std::move(step), type, kernel);
  return cudaSuccess;
}

}  // namespace

cudaError_t enqueue(cudaStream_t stream, const char* name, std::function<void()> work) {
  return enqueue_step(
      stream, name,
      [work = std::move(work)] {
        work();
        return true;
      },
      cudaGraphNodeTypeKernel);
}

cudaError_t enqueue_until(cudaStream_t stream, const char* name, std::function<bool()> step) {
  return enqueue_step(stream, name, std::move(step), cudaGraphNodeTypeKernel);
}

cudaError_t enqueue_kernel(cudaStream_t stream, const Grid& grid, const void* function,
                           std::shared_ptr<const void> arguments) {
  const KernelLaunch k{grid, function, std::move(arguments)};  // (a record-only device's emu::launch never comes here)
  const cudaError_t error = enqueue_step(stream, grid.kernel, kernel_step(k), cudaGraphNodeTypeKernel, &k);
  if (error == cudaSuccess) ++grids;
  return error;
}

}  // namespace cutrain::emu

using cutrain::emu::fail;
using cutrain::emu::lock_device;
using cutrain::emu::record_only;
using cutrain::emu::Use;

namespace {

// After a synchronising call has waited: the error of deferred work, if any, is its result, and
// it is reported once. A query (cudaStreamQuery, cudaEventQuery) answers it too but leaves it,
// so that a watchdog thread's queries do not hide it from the thread that synchronises.
cudaError_t after_wait() { return cutrain::emu::take_deferred_error(); }

}  // namespace

// ---- errors ----

cudaError_t cudaGetLastError() {
  if (cutrain::emu::last_error == cudaSuccess) {
    auto lock = lock_device();
    cutrain::emu::take_deferred_error();
  }
  const cudaError_t error = cutrain::emu::last_error;
  cutrain::emu::last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() {
  if (cutrain::emu::last_error != cudaSuccess) return cutrain::emu::last_error;
  auto lock = lock_device();
  return cutrain::emu::peek_deferred_error();
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
#define CUTRAIN_EMU_NAME(e) \
  case e: return #e;
    CUTRAIN_EMU_NAME(cudaSuccess)
    CUTRAIN_EMU_NAME(cudaErrorInvalidValue)
    CUTRAIN_EMU_NAME(cudaErrorMemoryAllocation)
    CUTRAIN_EMU_NAME(cudaErrorInvalidConfiguration)
    CUTRAIN_EMU_NAME(cudaErrorInvalidDevicePointer)
    CUTRAIN_EMU_NAME(cudaErrorInvalidMemcpyDirection)
    CUTRAIN_EMU_NAME(cudaErrorInsufficientDriver)
    CUTRAIN_EMU_NAME(cudaErrorInvalidDevice)
    CUTRAIN_EMU_NAME(cudaErrorInvalidResourceHandle)
    CUTRAIN_EMU_NAME(cudaErrorIllegalState)
    CUTRAIN_EMU_NAME(cudaErrorNotReady)
    CUTRAIN_EMU_NAME(cudaErrorLaunchFailure)
    CUTRAIN_EMU_NAME(cudaErrorCooperativeLaunchTooLarge)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureUnsupported)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureInvalidated)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureMerge)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureUnmatched)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureUnjoined)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureIsolation)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureImplicit)
    CUTRAIN_EMU_NAME(cudaErrorCapturedEvent)
    CUTRAIN_EMU_NAME(cudaErrorStreamCaptureWrongThread)
    CUTRAIN_EMU_NAME(cudaErrorUnknown)
#undef CUTRAIN_EMU_NAME
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: {
      static thread_local std::string text;
      {
        std::lock_guard lock(cutrain::emu::last_failure().mutex);
        text = cutrain::emu::last_failure().why;
      }
      if (text.empty()) return "unspecified launch failure";
      text = "unspecified launch failure: " + text;
      return text.c_str();
    }
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureMerge: return "operation would result in a merge of separate capture sequences";
    case cudaErrorStreamCaptureUnmatched: return "capture was not ended in the same stream as it began";
    case cudaErrorStreamCaptureUnjoined: return "capturing stream has unjoined work";
    case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
    case cudaErrorStreamCaptureWrongThread:
      return "attempt to terminate a thread-local capture sequence from another thread";
    case cudaErrorUnknown: return "unknown error";
  }
  return "unknown error";
}

// ---- the device ----

// The device a host thread works with, as CUDA keeps one per thread.
namespace {
thread_local int current_device = 0;
bool valid_device(int device) { return device >= 0 && device < cutrain::emu::device_count(); }
}  // namespace

int cutrain::emu::device_count() {
  static const int count = int(integer_from_environment("CUTRAIN_EMU_DEVICES", 2, 1, 8));
  return count;
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = cutrain::emu::device_count();
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "cutrain emulated GPU (CUDA emulation on the CPU)");
  prop->totalGlobalMem = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  const cutrain::emu::EmulatedDevice& d = cutrain::emu::emulated_device();
  prop->sharedMemPerBlock = d.shared_per_block;
  prop->regsPerBlock = d.registers_per_multiprocessor;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = d.multiprocessors;
  prop->maxThreadsPerMultiProcessor = d.threads_per_multiprocessor;
  prop->cooperativeLaunch = 1;
  prop->sharedMemPerMultiprocessor = d.shared_per_multiprocessor;
  prop->regsPerMultiprocessor = d.registers_per_multiprocessor;
  prop->sharedMemPerBlockOptin = d.shared_per_block_optin;
  prop->maxBlocksPerMultiProcessor = d.blocks_per_multiprocessor;
  prop->reservedSharedMemPerBlock = d.reserved_shared_per_block;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (!valid_device(device)) return fail(cudaErrorInvalidDevice);
  const cutrain::emu::EmulatedDevice& d = cutrain::emu::emulated_device();
  switch (attribute) {
    case cudaDevAttrMultiProcessorCount: *value = d.multiprocessors; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = int(d.shared_per_multiprocessor); return cudaSuccess;
    case cudaDevAttrCooperativeLaunch: *value = 1; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(d.shared_per_block_optin); return cudaSuccess;
  }
  return fail(cudaErrorInvalidValue);
}

// ---- kernels ----

cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      size_t(value) > cutrain::emu::emulated_device().shared_per_block_optin)
    return fail(cudaErrorInvalidValue);
  auto& r = cutrain::emu::registry();
  std::lock_guard lock(r.mutex);
  r.max_dynamic_shared[kernel] = size_t(value);
  return cudaSuccess;
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void*, int block_threads,
                                                          size_t dynamic_shared_bytes) {
  *blocks = cutrain::emu::max_active_blocks_per_multiprocessor(block_threads, dynamic_shared_bytes);
  return cudaSuccess;
}

namespace {

// An operation on `stream`, written down while recording; true when the device is record-only and
// the call does nothing more (Note [Record-only device]).
bool recorded(cutrain::RecordedOp::Kind kind, const char* name, cutrain::Traffic bytes = {},
              cudaStream_t stream = nullptr, cudaStream_t waits_for = nullptr) {
  cutrain::RecordedOp op;
  op.kind = kind;
  op.name = name;
  op.bytes = bytes;
  op.stream = stream;
  op.waits_for = waits_for;
  return cutrain::emu::record_instead(std::move(op));
}

// A synchronising call, which a record-only device answers at once.
bool host_wait(const char* call) { return recorded(cutrain::RecordedOp::Kind::host_wait, call); }

}  // namespace

cudaError_t cudaDeviceSynchronize() {
  auto lock = lock_device();
  if (const cudaError_t error = cutrain::emu::capture_check(Use::device_wide, nullptr)) return fail(error);
  if (host_wait("cudaDeviceSynchronize")) return cudaSuccess;
  cutrain::emu::wait_until(lock, cutrain::emu::device_idle);
  return after_wait();
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  *version = 13000;
  return cudaSuccess;
}

// ---- memory ----

namespace {

// The potentially unsafe calls are refused during some captures (Note [Capture rules]).
cudaError_t check_unsafe_call() {
  auto lock = lock_device();
  return cutrain::emu::capture_check(Use::unsafe, nullptr);
}

// cudaFree and cudaFreeHost wait for the device first, so no deferred work uses the memory.
cudaError_t wait_for_device() {
  auto lock = lock_device();
  if (const cudaError_t error = cutrain::emu::capture_check(Use::unsafe, nullptr)) return error;
  cutrain::emu::wait_until(lock, cutrain::emu::device_idle);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  *pointer = nullptr;
  if (const cudaError_t error = check_unsafe_call()) return fail(error);
  if (bytes == 0) return cudaSuccess;
  auto& r = cutrain::emu::registry();
  if (record_only()) {  // an address with a gap after it, never dereferenced (Note [Record-only device])
    std::lock_guard lock(r.mutex);
    const uintptr_t address = r.next_unbacked;
    r.next_unbacked += (bytes + 255) / 256 * 256 + 256;
    r.device[address] = r.unbacked[address] = bytes;
    *pointer = reinterpret_cast<void*>(address);
    return cudaSuccess;
  }
  // cudaMalloc aligns to 256 bytes; the allocation is exactly `bytes` long for AddressSanitizer.
  void* p = ::operator new(bytes, std::align_val_t(256), std::nothrow);
  if (!p) return fail(cudaErrorMemoryAllocation);
  std::lock_guard lock(r.mutex);
  r.device[reinterpret_cast<uintptr_t>(p)] = bytes;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (!pointer) return cudaSuccess;
  if (const cudaError_t error = wait_for_device()) return fail(error);
  auto& r = cutrain::emu::registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.device.erase(reinterpret_cast<uintptr_t>(pointer)) == 0) return fail(cudaErrorInvalidValue);
    if (r.unbacked.erase(reinterpret_cast<uintptr_t>(pointer)) == 1) return cudaSuccess;
  }
  ::operator delete(pointer, std::align_val_t(256));
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int) {
  *pointer = nullptr;
  if (const cudaError_t error = check_unsafe_call()) return fail(error);
  *pointer = ::operator new(bytes, std::align_val_t(256), std::nothrow);
  if (!*pointer) return fail(cudaErrorMemoryAllocation);
  auto& r = cutrain::emu::registry();
  std::lock_guard lock(r.mutex);
  r.pinned[reinterpret_cast<uintptr_t>(*pointer)] = bytes;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) { return cudaHostAlloc(pointer, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* pointer) {
  if (!pointer) return cudaSuccess;
  if (const cudaError_t error = wait_for_device()) return fail(error);
  auto& r = cutrain::emu::registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.pinned.erase(reinterpret_cast<uintptr_t>(pointer)) == 0) return fail(cudaErrorInvalidValue);
  }
  ::operator delete(pointer, std::align_val_t(256));
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  *total = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  *free = size_t(sysconf(_SC_AVPHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  return cudaSuccess;
}

namespace {

// Note [Copy synchronisation]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~
// After the CUDA Runtime API's "API synchronization behavior": where
// a copy's host side lies decides when the call returns.
//   cudaMemcpyAsync: from pageable memory to the device, the source is staged (copied) at the
//   call, which returns at once; from pinned memory the copy reads the host buffer when it runs;
//   to pageable memory, and host to host, the call returns when the copy is done; to pinned
//   memory and device to device, at once.
//   cudaMemcpy: on the legacy stream; returns when done, except device to device.
//   Captured, a copy is a memcpy node that reads and writes host memory when the graph runs.
enum class Side { device, pinned, pageable };

Side side_of(const void* p, size_t bytes) {
  if (cutrain::emu::device_range(p, bytes).touches) return Side::device;
  return cutrain::emu::pinned(p, bytes) ? Side::pinned : Side::pageable;
}

std::function<bool()> copy_step(void* dst, const void* src, size_t bytes) {
  return [=] {
    std::memmove(dst, src, bytes);
    return true;
  };
}

// Enqueues the copy on `s` (checked) and waits for it where Note [Copy synchronisation] says.
cudaError_t copy_on(std::unique_lock<std::mutex>& lock, CUstream_st* s, void* dst, const void* src, size_t bytes,
                    bool synchronous_call) {
  const Side from = side_of(src, bytes), to = side_of(dst, bytes);
  if (s->capture) {
    cutrain::emu::enqueue_op(lock, s, "memcpy", copy_step(dst, src, bytes), cudaGraphNodeTypeMemcpy);
    return cudaSuccess;
  }
  std::function<bool()> step = copy_step(dst, src, bytes);
  if (from == Side::pageable && to == Side::device && !synchronous_call) {
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    step = [staged, dst] {
      std::memcpy(dst, staged->data(), staged->size());
      return true;
    };
  }
  const std::shared_ptr<cutrain::emu::Op> op =
      cutrain::emu::enqueue_op(lock, s, "memcpy", std::move(step), cudaGraphNodeTypeMemcpy);
  const bool waits = synchronous_call ? !(from == Side::device && to == Side::device)
                                      : to == Side::pageable || (from != Side::device && to != Side::device);
  if (!waits) return cudaSuccess;
  cutrain::emu::wait_until(lock, [&] { return op->done; });
  return after_wait();
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t error = cutrain::emu::check_copy(dst, src, bytes, kind)) return fail(error);
  auto lock = lock_device();
  CUstream_st* legacy = cutrain::emu::find_stream(nullptr);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::unsafe, legacy)) return fail(error);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::enqueue, legacy)) return fail(error);
  if (bytes == 0 || host_wait("cudaMemcpy")) return cudaSuccess;
  if (const cudaError_t error = copy_on(lock, legacy, dst, src, bytes, true)) return fail(error);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!cutrain::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::check_copy(dst, src, bytes, kind)) return fail(error);
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::enqueue, s)) return fail(error);
  if (recorded(cutrain::RecordedOp::Kind::memcpy, "memcpy", {int64_t(bytes), int64_t(bytes)}, stream))
    return cudaSuccess;
  ++cutrain::emu::copies;
  if (bytes == 0) return cudaSuccess;
  if (const cudaError_t error = copy_on(lock, s, dst, src, bytes, false)) return fail(error);
  return cudaSuccess;
}

namespace {

std::function<bool()> memset_step(void* pointer, int value, size_t bytes) {
  return [=] {
    std::memset(pointer, value, bytes);
    return true;
  };
}

}  // namespace

// Asynchronous, on the legacy stream: the API synchronization behavior of a memset of device memory.
// Not capturable, so never in a step: the step's record leaves it out.
cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!cutrain::emu::device_range(pointer, bytes).inside) return fail(cudaErrorInvalidValue);
  auto lock = lock_device();
  CUstream_st* legacy = cutrain::emu::find_stream(nullptr);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::unsafe, legacy)) return fail(error);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::enqueue, legacy)) return fail(error);
  if (record_only()) return cudaSuccess;
  cutrain::emu::enqueue_op(lock, legacy, "memset", memset_step(pointer, value, bytes), cudaGraphNodeTypeMemset);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  if (!cutrain::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  if (bytes > 0 && !cutrain::emu::device_range(pointer, bytes).inside) return fail(cudaErrorInvalidValue);
  if (recorded(cutrain::RecordedOp::Kind::memset, "memset", {0, int64_t(bytes)}, stream)) return cudaSuccess;
  ++cutrain::emu::memsets;
  if (bytes == 0) return cudaSuccess;
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::enqueue, s)) return fail(error);
  cutrain::emu::enqueue_op(lock, s, "memset", memset_step(pointer, value, bytes), cudaGraphNodeTypeMemset);
  return cudaSuccess;
}

// ---- streams and events ----

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, 0);
}

// The priority is not kept: the scheduler picks among ready streams alike.
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int) {
  auto lock = lock_device();
  *stream = cutrain::emu::add_stream(flags);
  return cudaSuccess;
}

// An H200's: 0 is the least priority, -5 the greatest.
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s || s == cutrain::emu::find_stream(nullptr)) return fail(cudaErrorInvalidResourceHandle);
  if (s->capture) return fail(cudaErrorStreamCaptureUnsupported);
  cutrain::emu::wait_until(lock, [s] { return cutrain::emu::stream_idle(s); });
  cutrain::emu::remove_stream(s);
  return cudaSuccess;
}

namespace {

// Whether `s` has no work left; for the legacy stream, which every blocking stream's work
// precedes (Note [Legacy stream]), whether they have none either.
bool stream_done(CUstream_st* s) {
  if (!cutrain::emu::stream_idle(s)) return false;
  if (s != cutrain::emu::find_stream(nullptr)) return true;
  return cutrain::emu::blocking_streams_idle();
}

}  // namespace

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::synchronise, s)) return fail(error);
  if (host_wait("cudaStreamSynchronize")) return cudaSuccess;
  cutrain::emu::wait_until(lock, [s] { return stream_done(s); });
  return after_wait();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::synchronise, s)) return fail(error);
  if (const cudaError_t error = cutrain::emu::peek_deferred_error()) return error;
  if (stream_done(s)) return cudaSuccess;
  cutrain::emu::nudge_device();
  return cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s || !cutrain::emu::known_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::enqueue, s)) return fail(error);
  if (recorded(cutrain::RecordedOp::Kind::wait, "wait", {}, stream, event->recorded_on)) return cudaSuccess;
  if (event->capture || s->capture) {
    if (const cudaError_t error = cutrain::emu::wait_in_capture(s, event)) return fail(error);
    return cudaSuccess;
  }
  if (!event->last_record || event->last_record->done) return cudaSuccess;
  const auto wait = cutrain::emu::enqueue_op(lock, s, "cudaStreamWaitEvent", [] { return true; });
  wait->after.push_back(event->last_record);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  auto lock = lock_device();
  *event = new CUevent_st;
  (*event)->timing = !(flags & cudaEventDisableTiming);
  cutrain::emu::add_event(*event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  auto lock = lock_device();
  if (!cutrain::emu::known_event(event)) return fail(cudaErrorInvalidResourceHandle);
  cutrain::emu::remove_event(event);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s || !cutrain::emu::known_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(Use::enqueue, s)) return fail(error);
  event->recorded_on = stream;
  if (record_only()) return cudaSuccess;
  if (s->capture) {
    // Captured, a record is no node: the event stands for the nodes the stream has so far.
    event->capture = s->capture;
    event->capture_nodes = s->capture_tail;
    return cudaSuccess;
  }
  event->capture = nullptr;
  event->last_record = cutrain::emu::enqueue_op(lock, s, "cudaEventRecord", [] { return true; });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  auto lock = lock_device();
  if (!cutrain::emu::known_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (event->capture) return fail(cudaErrorCapturedEvent);
  if (host_wait("cudaEventSynchronize")) return cudaSuccess;
  if (event->last_record) {
    const std::shared_ptr<cutrain::emu::Op> record = event->last_record;
    cutrain::emu::wait_until(lock, [&] { return record->done; });
  }
  return after_wait();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  auto lock = lock_device();
  if (!cutrain::emu::known_event(event)) return fail(cudaErrorInvalidResourceHandle);
  if (event->capture) return fail(cudaErrorCapturedEvent);
  if (const cudaError_t error = cutrain::emu::peek_deferred_error()) return error;
  if (!event->last_record || event->last_record->done) return cudaSuccess;
  cutrain::emu::nudge_device();
  return cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  auto lock = lock_device();
  if (!cutrain::emu::known_event(start) || !cutrain::emu::known_event(end)) return fail(cudaErrorInvalidResourceHandle);
  if (!start->timing || !end->timing || !start->last_record || !end->last_record)
    return fail(cudaErrorInvalidResourceHandle);
  if (!start->last_record->done || !end->last_record->done) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(end->last_record->finished - start->last_record->finished).count();
  return cudaSuccess;
}
