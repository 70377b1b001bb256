// runtime.h: the part of the CUDA runtime API that cutrain calls, for the emulation (emu/).
// Names, signatures, values, error codes and error strings are the toolkit's (CUDA 13).
//
// Streams are asynchronous, as on a GPU: work enqueued on a stream runs later, on the emulation's
// device thread, in an order a seeded scheduler picks among those that stream order, events and the
// legacy default stream allow (stream_scheduler.h, Note [Deferred work]). CUTRAIN_EMU_STREAM_SEED
// chooses the seed. The calls synchronise as the CUDA Runtime API's "API synchronization behavior"
// says: cudaMemcpyAsync from pinned memory reads it when the copy runs, from pageable memory
// when it is called (it is staged); a copy to pageable memory returns when done; cudaMemcpy
// waits except device to device; cudaMemset does not wait; cudaFree waits for the device. A
// kernel that fails in deferred work is reported, naming it, by the next synchronising call (and
// then cudaGetLastError), not by its launch.
//
// Stream capture records the work into a graph instead (graph.cpp), with CUDA's capture rules.
//
// Device memory is host memory, one heap allocation per cudaMalloc of exactly the asked size, so
// AddressSanitizer reports a kernel or a copy that runs past a buffer. The emulation remembers
// every allocation: a copy or memset whose device side is not inside one fails with
// cudaErrorInvalidValue, as does one whose host side is device memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "emu/vector_types.h"

// Builds that compile against the emulation can tell (tests/gpu.h tags their tests [emu]).
#define CUTRAIN_CUDA_EMULATION 1

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorLaunchFailure = 719,
  cudaErrorCooperativeLaunchTooLarge = 720,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureMerge = 902,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
  cudaErrorUnknown = 999,
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
struct CUgraph_st;
typedef struct CUgraph_st* cudaGraph_t;
struct CUgraphNode_st;
typedef struct CUgraphNode_st* cudaGraphNode_t;
struct CUgraphExec_st;
typedef struct CUgraphExec_st* cudaGraphExec_t;

// The legacy default stream by name, as the handle 0 is.
#define cudaStreamLegacy ((cudaStream_t)0x1)

constexpr unsigned int cudaStreamDefault = 0x00;
constexpr unsigned int cudaStreamNonBlocking = 0x01;
constexpr unsigned int cudaEventDefault = 0x00;
constexpr unsigned int cudaEventBlockingSync = 0x01;
constexpr unsigned int cudaEventDisableTiming = 0x02;
constexpr unsigned int cudaHostAllocDefault = 0x00;

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};

enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

enum cudaGraphNodeType {
  cudaGraphNodeTypeKernel = 0x00,
  cudaGraphNodeTypeMemcpy = 0x01,
  cudaGraphNodeTypeMemset = 0x02,
  cudaGraphNodeTypeHost = 0x03,
  cudaGraphNodeTypeGraph = 0x04,
  cudaGraphNodeTypeEmpty = 0x05,
  cudaGraphNodeTypeWaitEvent = 0x06,
  cudaGraphNodeTypeEventRecord = 0x07,
};

struct cudaKernelNodeParams {
  void* func;
  dim3 gridDim;
  dim3 blockDim;
  unsigned int sharedMemBytes;
  void** kernelParams;
  void** extra;
};

// The launch attributes of cudaLaunchKernelEx, of which cutrain sets one (kernels/launch.cuh,
// under nvcc only: emulated, launch.h's launch takes `cooperative`).
enum cudaLaunchAttributeID {
  cudaLaunchAttributeIgnore = 0,
  cudaLaunchAttributeAccessPolicyWindow = 1,
  cudaLaunchAttributeCooperative = 2,
};
union cudaLaunchAttributeValue {
  char pad[64];
  int cooperative;
};
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  char pad[8 - sizeof(cudaLaunchAttributeID)];
  cudaLaunchAttributeValue val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim;
  dim3 blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned int numAttrs;
};

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
// Version 13.0, as the toolkit the GPU build uses.
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaDriverGetVersion(int* version);

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
// The host's available and physical memory, which emulated device memory is.
cudaError_t cudaMemGetInfo(size_t* free, size_t* total);

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
// Priorities are accepted, not honoured: the scheduler picks among ready streams alike.
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority);
cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest);
// Waits for the stream's work first (a GPU would let it finish after the call).
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
// Host time between the two records' execution on the device thread, in ms: the emulation's
// time, nothing like a GPU's.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// ---- stream capture and graphs (graph.cpp) ----
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
// The flags are checked as CUDA 13 defines them; their effects are not emulated (the scheduler
// keeps no priority).
enum cudaGraphInstantiateFlags {
  cudaGraphInstantiateFlagAutoFreeOnLaunch = 1,
  cudaGraphInstantiateFlagUpload = 2,
  cudaGraphInstantiateFlagDeviceLaunch = 4,
  cudaGraphInstantiateFlagUseNodePriority = 8,
};
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);
// cudaErrorInvalidValue for a library's kernel node, whose function the runtime API cannot name.
cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

namespace cutrain {
struct RecordedOp;  // emu/recording.h
}  // namespace cutrain

namespace cutrain::emu {

struct Grid;  // block.h

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
// Note [Record-only device]
// ~~~~~~~~~~~~~~~~~~~~~~~~~
// While a recorder that plans is installed on the calling thread
// (emu/recording.h), the emulated device records what the thread
// enqueues and runs none of it, as PyTorch's meta device stands in for a real one: launches,
// memsets, copies, cuDNN and cuBLAS calls, and waits between streams are written down after the
// checks a call makes, and not enqueued; cudaMalloc hands out addresses that nothing dereferences
// (256-byte aligned, far from real memory) and the copies and memsets that would touch them do
// nothing; a synchronising call is a host wait, written down, that returns at once. The device
// then presents an H200's 132 multiprocessors (each as kDevice's, which are an H200's), so that
// what is planned for the device -- batch norm's grids and the rows they keep in shared memory --
// is planned as for an H200. While a RunWhileRecording is alive on the thread as well, the work
// runs as usual and is written down too, which is how tests compare a record with what ran.
inline constexpr EmulatedDevice kRecordOnlyDevice{.multiprocessors = 132};
// kRecordOnlyDevice while this thread's device is record-only, else kDevice.
const EmulatedDevice& emulated_device();
// The emulated machine's number of such devices: CUTRAIN_EMU_DEVICES, from 1 to 8, read once (a bad
// value ends the program in one line); 2 when unset, so that two ranks under cutrun each have one,
// as on a machine with two GPUs. CUTRAIN_EMU_DEVICES=1 is the one-GPU machine of the first real
// run, where a second rank finds no device of its own. A process works with one (cudaSetDevice),
// whichever it is: each process is its own emulated device memory.
int device_count();

// The blocks of `threads` threads and that much dynamic shared memory that fit one multiprocessor
// at once (cudaOccupancyMaxActiveBlocksPerMultiprocessor); 0 when none does.
int max_active_blocks_per_multiprocessor(int threads, size_t dynamic_shared_bytes);
// The dynamic shared memory a launch of `kernel` may have (cudaFuncSetAttribute).
size_t max_dynamic_shared_bytes(const void* kernel);

// Sets the last error; for a kernel that failed, `why` says what went wrong and where.
cudaError_t set_last_error(cudaError_t error, const char* why = "");
// Whether `stream` is the default stream or one created and not yet destroyed.
bool valid_stream(cudaStream_t stream);
// The stream scheduler's seed (Note [Deferred work]): CUTRAIN_EMU_STREAM_SEED until set.
void set_stream_seed(uint64_t seed);
// Enqueues a kernel launch that passed block.h's check_grid, on `stream` or its capture.
// `arguments` owns what grid.arguments points to.
cudaError_t enqueue_kernel(cudaStream_t stream, const Grid& grid, const void* function,
                           std::shared_ptr<const void> arguments);

// What the emulated device has done since the program started, as a GPU's graph capture would
// see it: grids launched (that passed the launch checks and were enqueued), asynchronous memsets
// and copies. Tests hold emu/recording.h's record of the same calls against it.
struct WorkDone {
  long long grids = 0, memsets = 0, copies = 0;
};
WorkDone work_done();

// While one is alive on this thread, a recorder installed on it writes the work down and the
// device runs the work as usual, instead of being record-only (Note [Record-only device]). Tests
// hold the record of a real run against a plan with it.
class RunWhileRecording {
 public:
  RunWhileRecording();
  ~RunWhileRecording();
  RunWhileRecording(const RunWhileRecording&) = delete;
  RunWhileRecording& operator=(const RunWhileRecording&) = delete;

 private:
  bool previous_;
};

// Writes `op` down while recording; true when the device is record-only and the call must do
// nothing more (Note [Record-only device]).
bool record_instead(cutrain::RecordedOp op);

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
// being captured. It runs when the stream's order and its events let it, like a kernel, on the
// device thread (so it must not make a synchronising call). `name` names it in errors and in the
// graph. An exception it throws is deferred work's error: the next synchronising call reports
// cudaErrorLaunchFailure with `name` and the exception's message.
cudaError_t enqueue(cudaStream_t stream, const char* name, std::function<void()> work);
// Enqueues an operation that finishes when `step` returns true. The device calls `step` again and
// again, and runs other streams' work meanwhile, as a collective waiting for its peers does.
// Captured, the graph keeps a copy of `step` as it is now, and each replay calls a fresh copy of
// that, so state the step keeps starts afresh in every replay.
cudaError_t enqueue_until(cudaStream_t stream, const char* name, std::function<bool()> step);

}  // namespace cutrain::emu
