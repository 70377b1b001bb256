// The emulated device's streams, events and graphs (emu/stream_scheduler.h, graph.cpp):
// deferred work runs in the orders stream order and events allow, and only those; copies read
// pinned memory when they run; the legacy stream waits for blocking streams only; capture
// records nodes and edges that a replay honours; the calls CUDA forbids during a capture fail and
// invalidate it; a graph's kernels are checked against their attributes at launch.
#include <catch2/catch.hpp>

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/base/check.h"
#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

using namespace cutrain;
using test::PoisonedBuffer;

namespace {

constexpr int kSeeds = 8;

// out[i] = value for every i < n.
__global__ void fill_kernel(int* out, int n, int value) {
  const int i = int(threadIdx.x);
  if (i < n) out[i] = value;
}

// out[i] = a * in[i] + b.
__global__ void affine_kernel(const int* in, int* out, int n, int a, int b) {
  const int i = int(threadIdx.x);
  if (i < n) out[i] = a * in[i] + b;
}

__global__ void add_kernel(const int* x, const int* y, int* out, int n) {
  const int i = int(threadIdx.x);
  if (i < n) out[i] = x[i] + y[i];
}

void fill(cudaStream_t stream, int* out, int n, int value) {
  launch_kernel("fill_kernel", fill_kernel, 1, 64, 0, stream, out, n, value);
}

void affine(cudaStream_t stream, const int* in, int* out, int n, int a, int b) {
  launch_kernel("affine_kernel", affine_kernel, 1, 64, 0, stream, in, out, n, a, b);
}

// A stream of `flags`, destroyed at the end of the scope.
class Stream {
 public:
  explicit Stream(unsigned flags = cudaStreamNonBlocking) { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, flags)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  operator cudaStream_t() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

class Event {
 public:
  Event() { CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDefault)); }
  ~Event() { cudaEventDestroy(event_); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  operator cudaEvent_t() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Holds `stream` back until open(): what is enqueued after it waits, whatever the schedule.
class Gate {
 public:
  explicit Gate(cudaStream_t stream) {
    CUDA_CHECK(emu::enqueue_until(stream, "gate", [open = open_] { return open->load(); }));
  }
  void open() { open_->store(true); }

 private:
  std::shared_ptr<std::atomic<bool>> open_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace

TEST_CASE("streams: a missing cudaStreamWaitEvent gives a wrong result under some seed, and never with it",
          "[emu]") {
  Stream producer, consumer;
  Event written;
  PoisonedBuffer<int> x(1), y(1);
  for (bool wait : {true, false}) {
    int wrong = 0;
    for (int seed = 1; seed <= kSeeds; ++seed) {
      emu::set_stream_seed(uint64_t(seed));
      fill(producer, x.get(), 1, 0);
      CUDA_CHECK(cudaStreamSynchronize(producer));
      fill(producer, x.get(), 1, seed);
      if (wait) {
        CUDA_CHECK(cudaEventRecord(written, producer));
        CUDA_CHECK(cudaStreamWaitEvent(consumer, written, 0));
      }
      affine(consumer, x.get(), y.get(), 1, 1, 0);
      CUDA_CHECK(cudaDeviceSynchronize());
      wrong += y.copy_to_host()[0] != seed;
    }
    INFO("wait " << wait);
    if (wait) CHECK(wrong == 0);
    if (!wait) CHECK(wrong > 0);
  }
}

TEST_CASE("streams: an async copy reads pinned memory when it runs, pageable memory when it is called", "[emu]") {
  Stream stream;
  PoisonedBuffer<int> first(1), second(1);
  for (bool pinned : {true, false}) {
    int* pinned_host = nullptr;
    CUDA_CHECK(cudaMallocHost(&pinned_host, sizeof(int)));
    std::vector<int> pageable(1);
    int* staging = pinned ? pinned_host : pageable.data();
    Gate gate(stream);
    // The staging buffer is reused before the first copy ran: a pipeline without its event.
    *staging = 1;
    CUDA_CHECK(cudaMemcpyAsync(first.get(), staging, sizeof(int), cudaMemcpyHostToDevice, stream));
    *staging = 2;
    CUDA_CHECK(cudaMemcpyAsync(second.get(), staging, sizeof(int), cudaMemcpyHostToDevice, stream));
    CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);
    gate.open();
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CHECK(cudaStreamQuery(stream) == cudaSuccess);
    INFO("pinned " << pinned);
    CHECK(first.copy_to_host()[0] == (pinned ? 2 : 1));
    CHECK(second.copy_to_host()[0] == 2);
    CUDA_CHECK(cudaFreeHost(pinned_host));
  }
}

TEST_CASE("streams: the legacy stream waits for blocking streams, not for non-blocking ones", "[emu]") {
  PoisonedBuffer<int> x(1), y(1);
  for (unsigned flags : {cudaStreamDefault, cudaStreamNonBlocking}) {
    Stream other(flags);
    fill(nullptr, x.get(), 1, 0);
    fill(nullptr, y.get(), 1, -1);
    CUDA_CHECK(cudaDeviceSynchronize());
    Gate gate(other);
    fill(other, x.get(), 1, 1);
    affine(nullptr, x.get(), y.get(), 1, 1, 0);  // y = x on the legacy stream
    Event legacy_done;
    CUDA_CHECK(cudaEventRecord(legacy_done, nullptr));
    if (flags == cudaStreamNonBlocking) {
      CUDA_CHECK(cudaEventSynchronize(legacy_done));  // the legacy stream does not wait for the gate
      int seen = -1;  // (cudaMemcpy is on the legacy stream too; copy_to_host would wait for the device)
      CUDA_CHECK(cudaMemcpy(&seen, y.get(), sizeof(int), cudaMemcpyDeviceToHost));
      CHECK(seen == 0);
      gate.open();
    } else {
      CHECK(cudaEventQuery(legacy_done) == cudaErrorNotReady);
      gate.open();
      CUDA_CHECK(cudaEventSynchronize(legacy_done));
      CHECK(y.copy_to_host()[0] == 1);
    }
    CUDA_CHECK(cudaDeviceSynchronize());
  }
}

TEST_CASE("streams: enqueue_until waits without blocking the other streams", "[emu]") {
  Stream waiting, other;
  auto flag = std::make_shared<std::atomic<bool>>(false);
  auto polls = std::make_shared<std::atomic<int>>(0);
  PoisonedBuffer<int> x(1);
  // A collective on `waiting` that only work enqueued on `other` while it waits can finish.
  CUDA_CHECK(emu::enqueue_until(waiting, "waits for the flag", [flag, polls] {
    ++*polls;
    return flag->load();
  }));
  fill(waiting, x.get(), 1, 5);
  while (polls->load() == 0) std::this_thread::yield();  // the device is inside the wait
  CUDA_CHECK(emu::enqueue(other, "sets the flag", [flag] { flag->store(true); }));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (cudaStreamQuery(waiting) == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(cudaStreamQuery(waiting) == cudaSuccess);
  flag->store(true);  // (if it did block, the device goes on now)
  CHECK(x.copy_to_host()[0] == 5);
}

TEST_CASE("streams: events time the work between them, once it ran", "[emu]") {
  Stream stream;
  Event start, end;
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, end) == cudaErrorInvalidResourceHandle);  // never recorded
  cudaGetLastError();
  Gate gate(stream);
  CUDA_CHECK(cudaEventRecord(start, stream));
  CUDA_CHECK(cudaEventRecord(end, stream));
  CHECK(cudaEventElapsedTime(&ms, start, end) == cudaErrorNotReady);
  gate.open();
  CUDA_CHECK(cudaEventSynchronize(end));
  CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  CHECK(ms >= 0.0f);
}

namespace {

constexpr int kN = 48;

// The work of a step on two streams: main forks to side, each computes a part, main joins.
//   x = 2 * in; side: y = x + 1; main: z = 3 * x; main: out = y + z; a memset and a copy besides.
struct TwoStreamWork {
  PoisonedBuffer<int> in{kN}, x{kN}, y{kN}, z{kN}, out{kN}, copy{kN};
  Event forked, joined;

  void enqueue(cudaStream_t main, cudaStream_t side) {
    CUDA_CHECK(cudaMemsetAsync(z.get(), 0, kN * sizeof(int), main));
    affine(main, in.get(), x.get(), kN, 2, 0);
    CUDA_CHECK(cudaEventRecord(forked, main));
    CUDA_CHECK(cudaStreamWaitEvent(side, forked, 0));
    affine(side, x.get(), y.get(), kN, 1, 1);
    affine(main, x.get(), z.get(), kN, 3, 0);
    CUDA_CHECK(cudaEventRecord(joined, side));
    CUDA_CHECK(cudaStreamWaitEvent(main, joined, 0));
    launch_kernel("add_kernel", add_kernel, 1, 64, 0, main, y.get(), z.get(), out.get(), kN);
    CUDA_CHECK(cudaMemcpyAsync(copy.get(), out.get(), kN * sizeof(int), cudaMemcpyDeviceToDevice, main));
  }
};

struct NodeCounts {
  int kernels = 0, memsets = 0, copies = 0, others = 0;
};

NodeCounts count_nodes(cudaGraph_t graph) {
  size_t count = 0;
  CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  NodeCounts c;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    (type == cudaGraphNodeTypeKernel   ? c.kernels
     : type == cudaGraphNodeTypeMemset ? c.memsets
     : type == cudaGraphNodeTypeMemcpy ? c.copies
                                       : c.others) += 1;
  }
  return c;
}

}  // namespace

TEST_CASE("graphs: a capture of two streams joined by events replays equal to eager, in every seed", "[emu]") {
  Stream main, side;
  TwoStreamWork work;
  std::vector<int> in(kN);
  for (int i = 0; i < kN; ++i) in[size_t(i)] = i - 7;
  work.in.copy_from(in);
  std::vector<int> want(kN);
  for (int i = 0; i < kN; ++i) want[size_t(i)] = (2 * in[size_t(i)] + 1) + 3 * (2 * in[size_t(i)]);

  work.enqueue(main, side);
  CHECK(work.copy.copy_to_host() == want);

  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
  work.enqueue(main, side);
  cudaStreamCaptureStatus status;
  CUDA_CHECK(cudaStreamIsCapturing(side, &status));
  CHECK(status == cudaStreamCaptureStatusActive);  // side joined the capture through `forked`
  CUDA_CHECK(cudaStreamEndCapture(main, &graph));
  CUDA_CHECK(cudaStreamIsCapturing(side, &status));
  CHECK(status == cudaStreamCaptureStatusNone);

  // Event records and waits are edges, not nodes.
  const NodeCounts c = count_nodes(graph);
  CHECK(c.kernels == 4);
  CHECK(c.memsets == 1);
  CHECK(c.copies == 1);
  CHECK(c.others == 0);

  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));  // the executable graph keeps its own nodes
  for (int seed = 1; seed <= kSeeds; ++seed) {
    emu::set_stream_seed(uint64_t(seed));
    CUDA_CHECK(cudaMemset(work.copy.get(), 0xFF, kN * sizeof(int)));
    CUDA_CHECK(cudaMemset(work.y.get(), 0xFF, kN * sizeof(int)));
    CUDA_CHECK(cudaDeviceSynchronize());
    CUDA_CHECK(cudaGraphLaunch(exec, main));
    CUDA_CHECK(cudaStreamSynchronize(main));
    INFO("seed " << seed);
    CHECK(work.copy.copy_to_host() == want);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

namespace {

// Begins a capture of `stream`, enqueues a kernel, makes `forbidden` (which must fail with
// `error`), and ends the capture, which must fail as invalidated with no graph.
template <typename Call>
void check_forbidden(cudaStream_t stream, cudaStreamCaptureMode mode, cudaError_t error, Call forbidden) {
  PoisonedBuffer<int> x(1);
  CUDA_CHECK(cudaStreamBeginCapture(stream, mode));
  fill(stream, x.get(), 1, 1);
  CHECK(forbidden(x.get()) == error);
  CHECK(cudaGetLastError() == error);
  cudaStreamCaptureStatus status;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  CHECK(status == cudaStreamCaptureStatusInvalidated);
  CHECK(cudaMemsetAsync(x.get(), 0, sizeof(int), stream) == cudaErrorStreamCaptureInvalidated);
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(&status);
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
  CHECK(graph == nullptr);
  CHECK(cudaGetLastError() == cudaErrorStreamCaptureInvalidated);
  CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  CHECK(status == cudaStreamCaptureStatusNone);
}

}  // namespace

TEST_CASE("graphs: the calls CUDA forbids in a capture fail with its error and invalidate the capture", "[emu]") {
  Stream stream, blocking(cudaStreamDefault);
  std::vector<int> host(1);
  const auto thread_local_mode = cudaStreamCaptureModeThreadLocal;
  SECTION("cudaStreamSynchronize") {
    check_forbidden(stream, thread_local_mode, cudaErrorStreamCaptureUnsupported,
                    [&](int*) { return cudaStreamSynchronize(stream); });
  }
  SECTION("cudaStreamQuery") {
    check_forbidden(stream, thread_local_mode, cudaErrorStreamCaptureUnsupported,
                    [&](int*) { return cudaStreamQuery(stream); });
  }
  SECTION("cudaDeviceSynchronize") {
    check_forbidden(stream, thread_local_mode, cudaErrorStreamCaptureUnsupported,
                    [&](int*) { return cudaDeviceSynchronize(); });
  }
  SECTION("a synchronous copy") {
    check_forbidden(stream, thread_local_mode, cudaErrorStreamCaptureUnsupported, [&](int* x) {
      return cudaMemcpy(host.data(), x, sizeof(int), cudaMemcpyDeviceToHost);
    });
  }
  SECTION("a synchronous memset") {
    check_forbidden(stream, thread_local_mode, cudaErrorStreamCaptureUnsupported,
                    [&](int* x) { return cudaMemset(x, 0, sizeof(int)); });
  }
  SECTION("cudaMalloc in global mode") {
    check_forbidden(stream, cudaStreamCaptureModeGlobal, cudaErrorStreamCaptureUnsupported, [&](int*) {
      void* p = nullptr;
      return cudaMalloc(&p, 16);
    });
  }
  SECTION("the legacy stream while a blocking stream is captured") {
    check_forbidden(blocking, thread_local_mode, cudaErrorStreamCaptureImplicit,
                    [&](int* x) { return cudaMemsetAsync(x, 0, sizeof(int), nullptr); });
  }
  SECTION("an event recorded outside the capture") {
    Event outside;
    CUDA_CHECK(cudaEventRecord(outside, stream));
    check_forbidden(stream, thread_local_mode, cudaErrorStreamCaptureIsolation,
                    [&](int*) { return cudaStreamWaitEvent(stream, outside, 0); });
  }
}

TEST_CASE("graphs: a relaxed capture allows cudaMalloc and a fork not joined back fails at the end", "[emu]") {
  Stream main, side;
  PoisonedBuffer<int> x(1);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeRelaxed));
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, 16));
  CUDA_CHECK(cudaStreamEndCapture(main, &graph));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaFree(p));

  Event forked;
  CUDA_CHECK(cudaStreamBeginCapture(main, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(cudaEventRecord(forked, main));
  CUDA_CHECK(cudaStreamWaitEvent(side, forked, 0));
  fill(side, x.get(), 1, 1);  // main never waits for it
  CHECK(cudaStreamEndCapture(main, &graph) == cudaErrorStreamCaptureUnjoined);
  CHECK(graph == nullptr);
  CHECK(cudaGetLastError() == cudaErrorStreamCaptureUnjoined);
}

namespace {

// out[block] = the sum of every block's number + 1, read after the grid's barrier.
__global__ void grid_sum_kernel(int* slots, int* out) {
  CUTRAIN_DYNAMIC_SHARED(int, mine);
  if (threadIdx.x == 0) {
    mine[0] = int(blockIdx.x);
    slots[blockIdx.x] = int(blockIdx.x) + 1;
  }
  cooperative_groups::this_grid().sync();
  if (threadIdx.x == 0) {
    int sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += slots[b];
    out[blockIdx.x] = sum + mine[0] - int(blockIdx.x);
  }
}

}  // namespace

TEST_CASE("graphs: a kernel node is checked against its shared memory attribute when the graph is launched",
          "[emu]") {
  Stream stream;
  const int blocks = 4;
  const size_t shared = 64 * 1024;  // over the 48 KiB default: the kernel must opt in
  PoisonedBuffer<int> slots(blocks), out(blocks);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  // The launcher raises the kernel's attribute to this launch's size, outside the graph.
  launch_cooperative_kernel("grid_sum_kernel", grid_sum_kernel, blocks, 32, shared, stream, slots.get(), out.get());
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));

  // The node keeps its cooperative attribute: its grid barrier works in the replay.
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CHECK(out.copy_to_host() == std::vector<int>(blocks, blocks * (blocks + 1) / 2));

  // A smaller launch lowers the attribute below what the captured node needs.
  CUDA_CHECK(cudaFuncSetAttribute(grid_sum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared / 2)));
  CHECK(cudaGraphLaunch(exec, stream) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CUDA_CHECK(cudaFuncSetAttribute(grid_sum_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

TEST_CASE("graphs: a kernel that fails in a replay is reported by the next synchronising call, by name", "[emu]") {
  Stream stream;
  PoisonedBuffer<int> slots(2), out(2);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  // Not cooperative: the grid's barrier fails when the kernel runs.
  launch_kernel("grid_sum_kernel", grid_sum_kernel, 2, 32, sizeof(int), stream, slots.get(), out.get());
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CUDA_CHECK(cudaGraphLaunch(exec, stream));
  const cudaError_t status = cudaStreamSynchronize(stream);
  CHECK(status == cudaErrorLaunchFailure);
  CHECK_THAT(cudaGetErrorString(status), Catch::Contains("grid_sum_kernel: block ("));  // the first the schedule runs
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaSuccess);
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

TEST_CASE("graphs: a library's work is one kernel node without a function, replayed with its step afresh",
          "[emu]") {
  Stream stream;
  auto runs = std::make_shared<std::atomic<int>>(0);
  auto total_polls = std::make_shared<std::atomic<int>>(0);
  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  CUDA_CHECK(emu::enqueue(stream, "library call", [runs] { ++*runs; }));
  // Done at its third call: the count lives in the step, so each replay must start it at 0.
  CUDA_CHECK(emu::enqueue_until(stream, "collective", [total_polls, polls = 0]() mutable {
    ++*total_polls;
    return ++polls == 3;
  }));
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  const NodeCounts c = count_nodes(graph);
  CHECK(c.kernels == 2);
  CHECK(c.others == 0);
  size_t count = 1;
  cudaGraphNode_t node = nullptr;
  CUDA_CHECK(cudaGraphGetNodes(graph, &node, &count));
  cudaKernelNodeParams params{};
  CHECK(cudaGraphKernelNodeGetParams(node, &params) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  cudaGraphExec_t exec = nullptr;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CUDA_CHECK(cudaGraphDestroy(graph));
  CHECK(runs->load() == 0);  // captured, nothing ran
  for (int replay = 1; replay <= 2; ++replay) {
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CHECK(runs->load() == replay);
    CHECK(total_polls->load() == 3 * replay);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
}

TEST_CASE("streams: a library's work that throws is reported by the next synchronising call, by name", "[emu]") {
  Stream stream;
  CUDA_CHECK(emu::enqueue(stream, "failing library call", [] { throw std::runtime_error("bad descriptor"); }));
  Event after;
  CUDA_CHECK(cudaEventRecord(after, stream));
  while (cudaEventQuery(after) == cudaErrorNotReady) std::this_thread::yield();
  // A query (say, a watchdog's) sees the error and leaves it for the synchronising call.
  CHECK(cudaEventQuery(after) == cudaErrorLaunchFailure);
  const cudaError_t status = cudaStreamSynchronize(stream);
  CHECK(status == cudaErrorLaunchFailure);
  CHECK_THAT(cudaGetErrorString(status), Catch::Contains("failing library call: bad descriptor"));
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);  // reported once
}
