// runtime.cpp: the emulated CUDA runtime of runtime.h.
#include "kernels/emu/runtime.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>

struct CUstream_st {};
struct CUevent_st {
  std::chrono::steady_clock::time_point recorded;
  bool timing = true;
  bool is_recorded = false;
};

namespace cutrain::emu {

namespace {

thread_local cudaError_t last_error = cudaSuccess;
thread_local std::string last_failure;  // what the last cudaErrorLaunchFailure was

cudaError_t fail(cudaError_t error) { return set_last_error(error); }

// What was allocated: device buffers by start address, with their sizes; pinned host buffers;
// streams and events, so that one used after it was destroyed is an error.
struct Registry {
  std::mutex mutex;
  std::map<uintptr_t, size_t> device;
  std::set<void*> pinned;
  std::set<cudaStream_t> streams;
  std::set<cudaEvent_t> events;
  std::map<const void*, size_t> max_dynamic_shared;  // kernels given cudaFuncAttributeMaxDynamicSharedMemorySize
};

Registry& registry() {
  static Registry r;
  return r;
}

// Whether [p, p + bytes) lies in one device allocation; `touches` whether p is device memory at all.
struct DeviceRange {
  bool inside = false, touches = false;
};

DeviceRange device_range(const void* p, size_t bytes) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  auto it = r.device.upper_bound(address);
  if (it == r.device.begin()) return {};
  it = std::prev(it);
  const uintptr_t end = it->first + it->second;
  if (address >= end) return {};
  return {address + bytes <= end, true};
}

// Pinned buffers, streams and events: remembered while they live.
template <typename Handle>
void remember(std::set<Handle> Registry::*handles, Handle handle) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  (r.*handles).insert(handle);
}

// False for a handle that was never made or is already gone.
template <typename Handle>
bool forget(std::set<Handle> Registry::*handles, Handle handle) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return (r.*handles).erase(handle) != 0;
}

template <typename Handle>
bool known(std::set<Handle> Registry::*handles, Handle handle) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  return (r.*handles).count(handle) != 0;
}

bool valid_event(cudaEvent_t event) { return known(&Registry::events, event); }

// The copy direction `kind` asks for must be the one the pointers have.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (bytes == 0) return cudaSuccess;
  const DeviceRange d = device_range(dst, bytes), s = device_range(src, bytes);
  bool dst_device = d.touches, src_device = s.touches;
  switch (kind) {
    case cudaMemcpyHostToHost: dst_device = src_device = false; break;
    case cudaMemcpyHostToDevice: if (src_device || !dst_device) return cudaErrorInvalidValue; break;
    case cudaMemcpyDeviceToHost: if (!src_device || dst_device) return cudaErrorInvalidValue; break;
    case cudaMemcpyDeviceToDevice: if (!src_device || !dst_device) return cudaErrorInvalidValue; break;
    case cudaMemcpyDefault: break;
    default: return cudaErrorInvalidMemcpyDirection;
  }
  if ((dst_device && !d.inside) || (src_device && !s.inside)) return cudaErrorInvalidValue;
  return cudaSuccess;
}

}  // namespace

WorkDone work;  // what work_done() says

bool valid_stream(cudaStream_t stream) { return stream == nullptr || known(&Registry::streams, stream); }

WorkDone work_done() { return work; }
void count_grid() { ++work.grids; }

size_t max_dynamic_shared_bytes(const void* kernel) {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  const auto it = r.max_dynamic_shared.find(kernel);
  return it == r.max_dynamic_shared.end() ? kDevice.shared_per_block : it->second;
}

cudaError_t set_last_error(cudaError_t error, const char* why) {
  if (error == cudaErrorLaunchFailure) {
    last_failure = why;
    std::fprintf(stderr, "cuda emulation: %s\n", why);
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

// Until streams are asynchronous, an operation runs when it is enqueued.
cudaError_t enqueue(cudaStream_t stream, const char*, std::function<void()> work) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  work();
  return cudaSuccess;
}

cudaError_t enqueue_until(cudaStream_t stream, const char*, std::function<bool()> step) {
  if (!valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  while (!step()) std::this_thread::yield();
  return cudaSuccess;
}

}  // namespace cutrain::emu

using cutrain::emu::fail;

// ---- errors ----

cudaError_t cudaGetLastError() {
  const cudaError_t error = cutrain::emu::last_error;
  cutrain::emu::last_error = cudaSuccess;
  return error;
}

cudaError_t cudaPeekAtLastError() { return cutrain::emu::last_error; }

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorCooperativeLaunchTooLarge: return "cudaErrorCooperativeLaunchTooLarge";
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
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorLaunchFailure:
      if (cutrain::emu::last_failure.empty()) return "unspecified launch failure";
      static thread_local std::string text;
      text = "unspecified launch failure: " + cutrain::emu::last_failure;
      return text.c_str();
    case cudaErrorCooperativeLaunchTooLarge: return "too many blocks in cooperative launch";
  }
  return "unknown error";
}

// ---- the device ----

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : fail(cudaErrorInvalidDevice); }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "cutrain CUDA emulation (CPU)");
  prop->totalGlobalMem = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
  const cutrain::emu::EmulatedDevice& d = cutrain::emu::kDevice;
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
  if (device != 0) return fail(cudaErrorInvalidDevice);
  const cutrain::emu::EmulatedDevice& d = cutrain::emu::kDevice;
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
      size_t(value) > cutrain::emu::kDevice.shared_per_block_optin)
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

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

// ---- memory ----

cudaError_t cudaMalloc(void** pointer, size_t bytes) {
  *pointer = nullptr;
  if (bytes == 0) return cudaSuccess;
  // cudaMalloc aligns to 256 bytes; the allocation is exactly `bytes` long for AddressSanitizer.
  void* p = ::operator new(bytes, std::align_val_t(256), std::nothrow);
  if (!p) return fail(cudaErrorMemoryAllocation);
  auto& r = cutrain::emu::registry();
  std::lock_guard lock(r.mutex);
  r.device[reinterpret_cast<uintptr_t>(p)] = bytes;
  *pointer = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* pointer) {
  if (!pointer) return cudaSuccess;
  auto& r = cutrain::emu::registry();
  {
    std::lock_guard lock(r.mutex);
    if (r.device.erase(reinterpret_cast<uintptr_t>(pointer)) == 0) return fail(cudaErrorInvalidValue);
  }
  ::operator delete(pointer, std::align_val_t(256));
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int) {
  *pointer = ::operator new(bytes, std::align_val_t(256), std::nothrow);
  if (!*pointer) return fail(cudaErrorMemoryAllocation);
  cutrain::emu::remember(&cutrain::emu::Registry::pinned, *pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** pointer, size_t bytes) { return cudaHostAlloc(pointer, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* pointer) {
  if (!pointer) return cudaSuccess;
  if (!cutrain::emu::forget(&cutrain::emu::Registry::pinned, pointer)) return fail(cudaErrorInvalidValue);
  ::operator delete(pointer, std::align_val_t(256));
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t error = cutrain::emu::check_copy(dst, src, bytes, kind)) return fail(error);
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (!cutrain::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  ++cutrain::emu::work.copies;
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemset(void* pointer, int value, size_t bytes) {
  if (bytes == 0) return cudaSuccess;
  if (!cutrain::emu::device_range(pointer, bytes).inside) return fail(cudaErrorInvalidValue);
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream) {
  if (!cutrain::emu::valid_stream(stream)) return fail(cudaErrorInvalidResourceHandle);
  ++cutrain::emu::work.memsets;
  return cudaMemset(pointer, value, bytes);
}

// ---- streams and events ----

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int) {
  *stream = new CUstream_st;
  cutrain::emu::remember(&cutrain::emu::Registry::streams, *stream);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (!cutrain::emu::forget(&cutrain::emu::Registry::streams, stream)) return fail(cudaErrorInvalidResourceHandle);
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return cutrain::emu::valid_stream(stream) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) { return cudaStreamSynchronize(stream); }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  if (!cutrain::emu::valid_stream(stream) || !cutrain::emu::valid_event(event))
    return fail(cudaErrorInvalidResourceHandle);
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  *event = new CUevent_st;
  (*event)->timing = !(flags & cudaEventDisableTiming);
  cutrain::emu::remember(&cutrain::emu::Registry::events, *event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!cutrain::emu::forget(&cutrain::emu::Registry::events, event)) return fail(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!cutrain::emu::valid_event(event) || !cutrain::emu::valid_stream(stream))
    return fail(cudaErrorInvalidResourceHandle);
  event->recorded = std::chrono::steady_clock::now();
  event->is_recorded = true;
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return cutrain::emu::valid_event(event) ? cudaSuccess : fail(cudaErrorInvalidResourceHandle);
}

cudaError_t cudaEventQuery(cudaEvent_t event) { return cudaEventSynchronize(event); }

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!cutrain::emu::valid_event(start) || !cutrain::emu::valid_event(end))
    return fail(cudaErrorInvalidResourceHandle);
  if (!start->timing || !end->timing || !start->is_recorded || !end->is_recorded)
    return fail(cudaErrorInvalidResourceHandle);
  *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
  return cudaSuccess;
}
