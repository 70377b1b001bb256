// stream_scheduler.h: how the emulation (emu/) runs the work enqueued on streams, and how a
// stream capture records it instead. Internal to runtime.cpp, graph.cpp and stream_scheduler.cpp;
// runtime.h states the behaviour the programs see.
//
// Note [Deferred work]
// ~~~~~~~~~~~~~~~~~~~~
// Every operation enqueued on a stream (a kernel, an asynchronous copy or
// memset, an event's record or wait, a library's work through enqueue or enqueue_until, a graph
// launch) becomes an Op in its stream's queue. One device thread per process runs the Ops. It
// starts running when the host waits for the device (a synchronising call), when the host has
// enqueued nothing for a millisecond, or when more than kMaxPending Ops wait; it then runs until
// no Op is left or the host enqueues again with no one waiting. Among the Ops that may run (the
// head of each stream, once the Ops it must follow are done) it picks one with a seeded random
// generator (CUTRAIN_EMU_STREAM_SEED), so any order that stream order, events and the legacy
// stream allow can happen, and nothing else. An Op is a step function: a kernel's step runs the
// whole grid and is done; enqueue_until's step may answer "not yet", and then the device runs
// other streams' Ops before it asks again, so a collective waiting for a peer process never
// blocks the rest of the device.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "emu/block.h"
#include "emu/runtime.h"

namespace cutrain::emu {

struct Capture;

// One operation of a stream.
struct Op {
  std::string name;                        // in errors
  std::function<bool()> step;              // true once finished
  std::vector<std::shared_ptr<Op>> after;  // Ops of other streams it waits for (events, the legacy stream)
  bool done = false;
  std::chrono::steady_clock::time_point finished;  // an event record's time
};

// A node of a captured graph. Its step is the Op step it would have been eagerly (a kernel's holds
// the launch's arguments); a kernel node also keeps the launch's kernel and shape, which
// cudaGraphLaunch checks against the kernel's attributes of then.
struct GraphNode {
  cudaGraphNodeType type;
  std::string name;
  std::function<bool()> step;
  std::vector<size_t> deps;        // indices of the nodes it follows, in its graph
  const void* function = nullptr;  // a kernel node's kernel; nullptr for a library's work
  dim3 grid, block;
  size_t dynamic_shared_bytes = 0;
  bool cooperative = false;
};

// A kernel launch that passed the launch checks, for enqueue_kernel.
struct KernelLaunch {
  Grid grid;  // grid.arguments points into `arguments`
  const void* function;
  std::shared_ptr<const void> arguments;
};

}  // namespace cutrain::emu

struct CUgraphNode_st {
  cutrain::emu::GraphNode node;
};

struct CUgraph_st {
  std::vector<std::unique_ptr<CUgraphNode_st>> nodes;
};

struct CUstream_st {
  unsigned flags = cudaStreamDefault;
  std::deque<std::shared_ptr<cutrain::emu::Op>> queue;  // not yet done, oldest first
  std::shared_ptr<cutrain::emu::Op> last;               // the newest Op, done or not
  // While the stream is captured: its capture, and the nodes its next node follows.
  cutrain::emu::Capture* capture = nullptr;
  std::vector<size_t> capture_tail;
  bool blocking() const { return !(flags & cudaStreamNonBlocking); }
};

struct CUevent_st {
  bool timing = true;
  cudaStream_t recorded_on = nullptr;             // the stream of the latest cudaEventRecord, for the step's record
  std::shared_ptr<cutrain::emu::Op> last_record;  // nullptr until recorded
  // Recorded in a capture: the capture and the nodes the record followed.
  cutrain::emu::Capture* capture = nullptr;
  std::vector<size_t> capture_nodes;
};

namespace cutrain::emu {

// A stream capture in progress, from cudaStreamBeginCapture on `origin` to cudaStreamEndCapture.
struct Capture {
  cudaStreamCaptureMode mode;
  std::thread::id thread;  // that began it
  cudaStream_t origin;
  std::set<cudaStream_t> streams;  // origin and the streams that joined through events
  std::unique_ptr<CUgraph_st> graph;
  cudaError_t invalidated = cudaSuccess;  // why, once a forbidden call invalidated it
};

// Every stream, event and capture, and the device thread, share one lock.
std::unique_lock<std::mutex> lock_device();

// The stream a handle names: nullptr and cudaStreamLegacy are the legacy default stream. nullptr
// for a handle that is not a live stream. Caller holds the lock.
CUstream_st* find_stream(cudaStream_t stream);
CUstream_st* add_stream(unsigned flags);
void remove_stream(CUstream_st* stream);  // after its queue is empty
bool known_event(cudaEvent_t event);
void add_event(cudaEvent_t event);
void remove_event(cudaEvent_t event);

// Enqueues an Op on `stream` and returns it; while the stream is captured, adds a node of `type`
// to the capture instead and returns nullptr. Caller holds the lock and has checked the capture
// rules (capture_check).
std::shared_ptr<Op> enqueue_op(std::unique_lock<std::mutex>& lock, CUstream_st* stream, std::string name,
                               std::function<bool()> step, cudaGraphNodeType type = cudaGraphNodeTypeKernel,
                               const KernelLaunch* kernel = nullptr);
// Blocks until `finished()` holds, running the device meanwhile. Caller holds the lock.
void wait_until(std::unique_lock<std::mutex>& lock, const std::function<bool()>& finished);
bool stream_idle(const CUstream_st* stream);
bool blocking_streams_idle();  // the streams created without cudaStreamNonBlocking
bool device_idle();
// Wakes the device thread to run what is pending, without waiting (the queries).
void nudge_device();

// An error in deferred work: a kernel that failed, a library's work that threw. The next
// synchronising call and cudaGetLastError report it, once. Caller holds the lock.
void defer_error(cudaError_t error, const std::string& why);
cudaError_t take_deferred_error();  // cudaSuccess when none; sets the last error and its text
cudaError_t peek_deferred_error();

// ---- the capture rules (Note [Capture rules] in stream_scheduler.cpp) ----------------------
enum class Use {
  enqueue,      // work on the stream
  synchronise,  // wait for the stream, or query it
  unsafe,       // a call the programming guide calls potentially unsafe: cudaMalloc, cudaMemcpy, ...
  device_wide,  // cudaDeviceSynchronize
};
// cudaSuccess when `use` of `stream` (nullptr for calls without one) is allowed now; otherwise
// CUDA's error, after invalidating the captures it concerns. Caller holds the lock.
cudaError_t capture_check(Use use, CUstream_st* stream);
// Whether the device thread is the caller (work must never wait for the device).
bool on_device_thread();

// cudaStreamWaitEvent where the stream or the event belongs to a capture: the stream's next node
// follows the event's nodes, and a stream outside the capture joins it (a fork). Caller holds
// the lock.
cudaError_t wait_in_capture(CUstream_st* stream, cudaEvent_t event);
// Starts capturing `origin` into a new graph; ends the capture (every stream that joined it leaves
// it) and hands over its graph. Caller holds the lock.
Capture* begin_capture(CUstream_st* origin, cudaStreamCaptureMode mode);
std::unique_ptr<CUgraph_st> end_capture(Capture* capture);

// A graph launch's Op step: replays `nodes` in an order their edges allow, picked with `seed`, one
// node a step, so that other streams' work runs between them.
std::function<bool()> replay_step(std::shared_ptr<const std::vector<GraphNode>> nodes, uint64_t seed);
// A seed for a replay, from the scheduler's generator. Caller holds the lock.
uint64_t next_seed();

}  // namespace cutrain::emu
