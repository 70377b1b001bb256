// runtime.h: the part of the CUDA runtime API that cutrain's kernel launchers, kernel tests and
// GPU loader call, for the emulation (kernels/emu). Names, signatures, error codes and error
// strings are the toolkit's; the semantics are synchronous: a copy, memset or kernel is finished
// when the call returns, so streams and events only keep their bookkeeping.
//
// Device memory is host memory, one heap allocation per cudaMalloc of exactly the asked size, so
// AddressSanitizer reports a kernel or a copy that runs past a buffer. The emulation remembers
// every allocation: a copy or memset whose device side is not inside one fails with
// cudaErrorInvalidValue, as does one whose host side is device memory.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>

// Builds that compile against the emulation can tell (tests/gpu.h tags their tests [emu]).
#define CUTRAIN_CUDA_EMULATION 1

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
  cudaErrorCooperativeLaunchTooLarge = 720,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;
struct CUevent_st;
typedef struct CUevent_st* cudaEvent_t;

constexpr unsigned int cudaStreamDefault = 0x00;
constexpr unsigned int cudaStreamNonBlocking = 0x01;
constexpr unsigned int cudaEventDefault = 0x00;
constexpr unsigned int cudaEventBlockingSync = 0x01;
constexpr unsigned int cudaEventDisableTiming = 0x02;
constexpr unsigned int cudaHostAllocDefault = 0x00;

struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major, minor;
  int multiProcessorCount;
  int maxThreadsPerMultiProcessor;
  int cooperativeLaunch;
  size_t sharedMemPerMultiprocessor;
  int regsPerMultiprocessor;
  size_t sharedMemPerBlockOptin;
  int maxBlocksPerMultiProcessor;
  size_t reservedSharedMemPerBlock;
};

// The device attributes cutrain asks for (values as the toolkit's).
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
  cudaDevAttrCooperativeLaunch = 95,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
};

enum cudaFuncAttribute {
  cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
};

// ---- errors ----
// A failed call, launch or kernel sets the last error, which cudaGetLastError returns and clears.
// Unlike a GPU, a kernel that failed leaves the emulated device usable afterwards.
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorName(cudaError_t error);
// For cudaErrorLaunchFailure from the emulation, also what went wrong, in which kernel.
const char* cudaGetErrorString(cudaError_t error);

// ---- the device: one ----
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device);
cudaError_t cudaDeviceSynchronize();

// ---- kernels: their shared memory limit and occupancy on the emulated device (below) ----
// cudaFuncAttributeMaxDynamicSharedMemorySize up to the device's opt-in limit; a launch may then
// have that much dynamic shared memory (48 KiB without it).
cudaError_t cudaFuncSetAttribute(const void* kernel, cudaFuncAttribute attribute, int value);
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* kernel, int block_threads,
                                                          size_t dynamic_shared_bytes);
template <typename Kernel>
cudaError_t cudaFuncSetAttribute(Kernel* kernel, cudaFuncAttribute attribute, int value) {
  return cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel), attribute, value);
}
template <typename Kernel>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, Kernel* kernel, int block_threads,
                                                          size_t dynamic_shared_bytes) {
  return cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, reinterpret_cast<const void*>(kernel), block_threads,
                                                       dynamic_shared_bytes);
}

// ---- memory ----
cudaError_t cudaMalloc(void** pointer, size_t bytes);
cudaError_t cudaFree(void* pointer);
cudaError_t cudaHostAlloc(void** pointer, size_t bytes, unsigned int flags);
cudaError_t cudaMallocHost(void** pointer, size_t bytes);
cudaError_t cudaFreeHost(void* pointer);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream = 0);
cudaError_t cudaMemset(void* pointer, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* pointer, int value, size_t bytes, cudaStream_t stream = 0);

// The typed overloads of cuda_runtime.h.
template <typename T>
cudaError_t cudaMalloc(T** pointer, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(pointer), bytes);
}
template <typename T>
cudaError_t cudaHostAlloc(T** pointer, size_t bytes, unsigned int flags) {
  return cudaHostAlloc(reinterpret_cast<void**>(pointer), bytes, flags);
}
template <typename T>
cudaError_t cudaMallocHost(T** pointer, size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(pointer), bytes);
}

// ---- streams and events ----
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
// Host time between the two records, in ms: with synchronous kernels, the emulation's time.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

namespace cutrain::emu {

// The emulated device, for its properties and the occupancy of kernels: an H200's limits per
// multiprocessor, on 4 multiprocessors (few, so that a cooperative grid, all of whose blocks are
// alive at once here, stays small). The emulation cannot know how many registers a kernel needs;
// it takes 32 per thread for every kernel, so registers never limit a block of 1024 threads to
// fewer than two per multiprocessor.
struct EmulatedDevice {
  int multiprocessors = 4;
  int threads_per_multiprocessor = 2048;
  int blocks_per_multiprocessor = 32;
  int registers_per_multiprocessor = 65536;
  int registers_per_thread = 32;
  size_t shared_per_multiprocessor = 228 * 1024;
  size_t shared_per_block = 48 * 1024;         // a launch's dynamic shared memory by default
  size_t shared_per_block_optin = 227 * 1024;  // with cudaFuncSetAttribute
  size_t reserved_shared_per_block = 1024;     // the runtime's own, per block
};
inline constexpr EmulatedDevice kDevice{};

// The blocks of `threads` threads and that much dynamic shared memory that fit one multiprocessor
// at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor); 0 when none does.
int max_active_blocks_per_multiprocessor(int threads, size_t dynamic_shared_bytes);
// The dynamic shared memory a launch of `kernel` may have (cudaFuncSetAttribute).
size_t max_dynamic_shared_bytes(const void* kernel);

// Sets the last error; for a kernel that failed, `why` says what went wrong and where.
cudaError_t set_last_error(cudaError_t error, const char* why = "");
// Whether `stream` is the default stream or one created and not yet destroyed.
bool valid_stream(cudaStream_t stream);

// What the emulated device has done since the program started, as a GPU's graph capture would
// see it: grids launched (that passed the launch checks), asynchronous memsets and copies. Tests
// hold kernels/recording.h's record of the same calls against it.
struct WorkDone {
  long long grids = 0, memsets = 0, copies = 0;
};
WorkDone work_done();
void count_grid();  // run_grid's

// ---- for the emulated libraries (cudnn.cpp, cublas.cpp, nccl.cpp) ----
// The live device allocation that holds `p`, if any.
struct Allocation {
  const void* base;
  size_t bytes;
};
std::optional<Allocation> allocation_of(const void* p);
// Whether [p, p + bytes) lies inside one live device allocation.
bool inside_device_allocation(const void* p, size_t bytes);

// Enqueues `work` on `stream` as one operation, which becomes one kernel node when the stream is
// being captured. It runs when the stream's order and its events let it, like a kernel. `name`
// names it in errors and in the graph.
cudaError_t enqueue(cudaStream_t stream, const char* name, std::function<void()> work);
// Enqueues an operation that finishes when `step` returns true. The device calls `step` again and
// again, and runs other streams' work meanwhile, as a collective waiting for its peers does.
cudaError_t enqueue_until(cudaStream_t stream, const char* name, std::function<bool()> step);

}  // namespace cutrain::emu
