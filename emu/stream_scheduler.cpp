// stream_scheduler.cpp: the device thread, the streams' queues and the capture rules of
// stream_scheduler.h.
#include "emu/stream_scheduler.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <random>
#include <string>

#include "emu/block.h"
#include "emu/environment.h"

namespace cutrain::emu {

namespace {

// When the device thread starts running without being asked (Note [Deferred work]).
constexpr size_t kMaxPending = 1024;
constexpr auto kIdle = std::chrono::milliseconds(1);
// How long it rests when every Op that may run is an enqueue_until that is not done yet.
constexpr auto kPollPause = std::chrono::microseconds(100);

// Set by a replay's step that finished a node though not its graph: the device made progress.
bool replay_progressed = false;  // the device thread's

struct Device {
  std::mutex mutex;
  std::condition_variable wake;      // the device thread waits on it for work
  std::condition_variable progress;  // host threads wait on it for the device
  CUstream_st legacy;
  std::set<CUstream_st*> streams;  // created and not destroyed
  std::set<cudaEvent_t> events;
  std::vector<std::unique_ptr<Capture>> captures;  // in progress
  size_t pending = 0;                              // Ops enqueued and not done
  int waiters = 0;                                 // host threads in wait_until
  bool nudged = false;                             // a query asked the device to run
  std::chrono::steady_clock::time_point last_enqueue;
  std::mt19937_64 random{
      integer_from_environment("CUTRAIN_EMU_STREAM_SEED", 0, 0, std::numeric_limits<uint64_t>::max())};
  bool started = false, stopping = false;
  std::thread thread;
  std::thread::id thread_id;
  cudaError_t deferred = cudaSuccess;
  std::string deferred_why;
};

// Never destroyed: an exit handler stops the device thread, which may touch it until then.
Device& device() {
  static Device& d = *new Device;
  return d;
}

bool ready(const Op& op) {
  return std::all_of(op.after.begin(), op.after.end(), [](const std::shared_ptr<Op>& o) { return o->done; });
}

// The streams whose head Op may run now.
std::vector<CUstream_st*> ready_streams(Device& d) {
  std::vector<CUstream_st*> out;
  const auto consider = [&](CUstream_st* s) {
    if (!s->queue.empty() && ready(*s->queue.front())) out.push_back(s);
  };
  consider(&d.legacy);
  for (CUstream_st* s : d.streams) consider(s);
  return out;
}

bool should_run(const Device& d) {
  return d.waiters > 0 || d.nudged || d.pending > kMaxPending ||
         std::chrono::steady_clock::now() - d.last_enqueue >= kIdle;
}

void device_main() {
  Device& d = device();
  std::unique_lock lock(d.mutex);
  size_t unfinished_steps = 0;  // in a row
  while (!d.stopping) {
    if (d.pending == 0) d.nudged = false;
    std::vector<CUstream_st*> candidates;
    if (d.pending > 0 && should_run(d)) candidates = ready_streams(d);
    if (candidates.empty()) {
      d.wake.wait_for(lock, kIdle);
      continue;
    }
    CUstream_st* s = candidates[d.random() % candidates.size()];
    const std::shared_ptr<Op> op = s->queue.front();
    lock.unlock();
    bool finished = true;
    replay_progressed = false;
    std::string failure;
    try {
      finished = op->step();
    } catch (const std::exception& e) {
      failure = op->name + ": " + e.what();
    }
    lock.lock();
    if (!failure.empty()) defer_error(cudaErrorLaunchFailure, failure);
    if (finished) {
      // The stream cannot be destroyed meanwhile: cudaStreamDestroy waits for its queue.
      op->done = true;
      op->finished = std::chrono::steady_clock::now();
      op->after.clear();
      op->step = nullptr;
      s->queue.pop_front();
      --d.pending;
      unfinished_steps = 0;
      d.progress.notify_all();
    } else if (replay_progressed) {
      unfinished_steps = 0;
    } else if (++unfinished_steps > 2 * candidates.size()) {
      unfinished_steps = 0;
      d.wake.wait_for(lock, kPollPause);
    }
  }
}

// At exit: the device thread finishes the step it is in, and what is still pending is dropped,
// as a process that exits drops its GPU work.
void stop_device() {
  Device& d = device();
  {
    std::lock_guard lock(d.mutex);
    d.stopping = true;
  }
  d.wake.notify_all();
  if (!d.thread.joinable()) return;
  if (on_device_thread()) {
    d.thread.detach();  // exit() called by enqueued work: the thread ends with the process
  } else {
    d.thread.join();
  }
}

void start_device(Device& d) {
  if (d.started) return;
  d.started = true;
  d.thread = std::thread(device_main);
  d.thread_id = d.thread.get_id();
  std::atexit(stop_device);
}

void invalidate(Capture& c, cudaError_t why) {
  if (c.invalidated == cudaSuccess) c.invalidated = why;
}

}  // namespace

std::unique_lock<std::mutex> lock_device() { return std::unique_lock(device().mutex); }

CUstream_st* find_stream(cudaStream_t stream) {
  Device& d = device();
  if (stream == nullptr || stream == cudaStreamLegacy) return &d.legacy;
  return d.streams.count(stream) ? stream : nullptr;
}

CUstream_st* add_stream(unsigned flags) {
  auto* s = new CUstream_st;
  s->flags = flags;
  device().streams.insert(s);
  return s;
}

void remove_stream(CUstream_st* stream) {
  device().streams.erase(stream);
  delete stream;
}

bool known_event(cudaEvent_t event) { return device().events.count(event) != 0; }
void add_event(cudaEvent_t event) { device().events.insert(event); }
void remove_event(cudaEvent_t event) { device().events.erase(event); }

void set_stream_seed(uint64_t seed) {
  auto lock = lock_device();
  device().random.seed(seed);
}

std::shared_ptr<Op> enqueue_op(std::unique_lock<std::mutex>&, CUstream_st* s, std::string name,
                               std::function<bool()> step, cudaGraphNodeType type, const KernelLaunch* kernel) {
  Device& d = device();
  if (s->capture) {
    GraphNode n;
    n.type = type;
    n.name = std::move(name);
    n.step = std::move(step);
    n.deps = s->capture_tail;
    if (kernel) {
      n.function = kernel->function;
      n.grid = kernel->grid.grid;
      n.block = kernel->grid.block;
      n.dynamic_shared_bytes = kernel->grid.dynamic_shared_bytes;
      n.cooperative = kernel->grid.cooperative;
    }
    auto& nodes = s->capture->graph->nodes;
    nodes.push_back(std::make_unique<CUgraphNode_st>(CUgraphNode_st{std::move(n)}));
    s->capture_tail = {nodes.size() - 1};
    return nullptr;
  }
  auto op = std::make_shared<Op>();
  op->name = std::move(name);
  op->step = std::move(step);
  // Note [Legacy stream]
  // ~~~~~~~~~~~~~~~~~~~~
  // An Op on the legacy stream follows all earlier work of the blocking
  // streams, and an Op on a blocking stream follows all earlier work of the legacy stream.
  // Non-blocking streams (cudaStreamNonBlocking) are not ordered against it at all.
  if (s == &d.legacy) {
    for (CUstream_st* other : d.streams)
      if (other->blocking() && other->last && !other->last->done) op->after.push_back(other->last);
  } else if (s->blocking() && d.legacy.last && !d.legacy.last->done) {
    op->after.push_back(d.legacy.last);
  }
  s->queue.push_back(op);
  s->last = op;
  ++d.pending;
  d.last_enqueue = std::chrono::steady_clock::now();
  start_device(d);
  if (d.pending > kMaxPending) d.wake.notify_one();
  return op;
}

void wait_until(std::unique_lock<std::mutex>& lock, const std::function<bool()>& finished) {
  Device& d = device();
  if (on_device_thread()) {
    std::fprintf(stderr, "cuda emulation: work enqueued on a stream waits for the device, which runs it\n");
    std::abort();
  }
  ++d.waiters;
  d.wake.notify_one();
  d.progress.wait(lock, finished);
  --d.waiters;
}

bool stream_idle(const CUstream_st* stream) { return stream->queue.empty(); }
bool device_idle() { return device().pending == 0; }

bool blocking_streams_idle() {
  for (const CUstream_st* s : device().streams)
    if (s->blocking() && !s->queue.empty()) return false;
  return true;
}

void nudge_device() {
  Device& d = device();
  d.nudged = true;
  d.wake.notify_one();
}

bool on_device_thread() { return std::this_thread::get_id() == device().thread_id; }

void defer_error(cudaError_t error, const std::string& why) {
  Device& d = device();
  std::fprintf(stderr, "cuda emulation: %s\n", why.c_str());
  if (d.deferred != cudaSuccess) return;  // the first is reported
  d.deferred = error;
  d.deferred_why = why;
}

cudaError_t take_deferred_error() {
  Device& d = device();
  const cudaError_t error = d.deferred;
  if (error == cudaSuccess) return error;
  set_last_error(error, d.deferred_why.c_str());
  d.deferred = cudaSuccess;
  d.deferred_why.clear();
  return error;
}

cudaError_t peek_deferred_error() { return device().deferred; }

// ---- captures --------------------------------------------------------------------------------

Capture* begin_capture(CUstream_st* origin, cudaStreamCaptureMode mode) {
  Device& d = device();
  auto c = std::make_unique<Capture>();
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = origin;
  c->streams = {origin};
  c->graph = std::make_unique<CUgraph_st>();
  origin->capture = c.get();
  origin->capture_tail.clear();
  d.captures.push_back(std::move(c));
  return d.captures.back().get();
}

std::unique_ptr<CUgraph_st> end_capture(Capture* capture) {
  Device& d = device();
  for (cudaStream_t s : capture->streams) {
    s->capture = nullptr;
    s->capture_tail.clear();
  }
  for (auto& e : d.events)
    if (e->capture == capture) e->capture = nullptr;
  std::unique_ptr<CUgraph_st> graph = std::move(capture->graph);
  std::erase_if(d.captures, [&](const std::unique_ptr<Capture>& c) { return c.get() == capture; });
  return graph;
}

cudaError_t wait_in_capture(CUstream_st* s, cudaEvent_t event) {
  Capture* c = event->capture;
  if (!c) {
    // An event recorded outside the capture: the graph cannot wait for it.
    invalidate(*s->capture, cudaErrorStreamCaptureIsolation);
    return cudaErrorStreamCaptureIsolation;
  }
  if (c->invalidated != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
  if (s->capture && s->capture != c) {
    invalidate(*s->capture, cudaErrorStreamCaptureMerge);
    invalidate(*c, cudaErrorStreamCaptureMerge);
    return cudaErrorStreamCaptureMerge;
  }
  if (!s->capture) {
    s->capture = c;
    s->capture_tail.clear();
    c->streams.insert(s);
  }
  for (size_t node : event->capture_nodes)
    if (std::find(s->capture_tail.begin(), s->capture_tail.end(), node) == s->capture_tail.end())
      s->capture_tail.push_back(node);
  return cudaSuccess;
}

// Note [Capture rules]
// ~~~~~~~~~~~~~~~~~~~~
// After the CUDA C++ Programming Guide's "Prohibited and Unhandled
// Operations" of stream capture and cudaStreamBeginCapture's modes:
//   - a stream being captured may not be synchronised or queried (its work is not scheduled);
//   - the legacy stream may not be used (enqueued on, synchronised, queried) while a blocking
//     stream is captured, since it would wait for that stream's work: cudaErrorStreamCaptureImplicit;
//   - the potentially unsafe calls (cudaMalloc, cudaFree, the pinned allocations, the synchronous
//     cudaMemcpy and cudaMemset) may not be made by the thread that began a global or
//     thread-local capture, nor by any thread during a global one;
//   - cudaDeviceSynchronize may not be called while any stream is captured;
//   - a capture that was invalidated refuses all work with cudaErrorStreamCaptureInvalidated.
// A refused call invalidates the captures it concerns: cudaStreamEndCapture then fails.
cudaError_t capture_check(Use use, CUstream_st* s) {
  Device& d = device();
  if (d.captures.empty()) return cudaSuccess;
  if (s && s->capture && s->capture->invalidated != cudaSuccess) return cudaErrorStreamCaptureInvalidated;
  if (use == Use::device_wide) {
    for (auto& c : d.captures) invalidate(*c, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
  }
  if (use == Use::synchronise && s && s->capture) {
    invalidate(*s->capture, cudaErrorStreamCaptureUnsupported);
    return cudaErrorStreamCaptureUnsupported;
  }
  if (use == Use::unsafe) {
    bool refused = false;
    for (auto& c : d.captures) {
      const bool own = c->thread == std::this_thread::get_id() && c->mode != cudaStreamCaptureModeRelaxed;
      if (own || c->mode == cudaStreamCaptureModeGlobal) {
        invalidate(*c, cudaErrorStreamCaptureUnsupported);
        refused = true;
      }
    }
    if (refused) return cudaErrorStreamCaptureUnsupported;
  }
  if (s == &d.legacy) {
    bool refused = false;
    for (auto& c : d.captures)
      for (cudaStream_t captured : c->streams)
        if (captured->blocking()) {
          invalidate(*c, cudaErrorStreamCaptureImplicit);
          refused = true;
        }
    if (refused) return cudaErrorStreamCaptureImplicit;
  }
  return cudaSuccess;
}

// ---- graph replay ----------------------------------------------------------------------------

std::function<bool()> replay_step(std::shared_ptr<const std::vector<GraphNode>> nodes, uint64_t seed) {
  struct Replay {
    std::shared_ptr<const std::vector<GraphNode>> nodes;
    std::vector<std::function<bool()>> steps;  // each node's, as captured: state starts afresh
    std::vector<char> done;
    size_t left;
    std::mt19937_64 random;
  };
  auto r = std::make_shared<Replay>();
  r->nodes = std::move(nodes);
  for (const GraphNode& n : *r->nodes) r->steps.push_back(n.step);
  r->done.assign(r->nodes->size(), 0);
  r->left = r->nodes->size();
  r->random.seed(seed);
  return [r]() {
    if (r->left == 0) return true;
    std::vector<size_t> ready;
    for (size_t i = 0; i < r->nodes->size(); ++i) {
      if (r->done[i]) continue;
      const std::vector<size_t>& deps = (*r->nodes)[i].deps;
      if (std::all_of(deps.begin(), deps.end(), [&](size_t j) { return r->done[j] != 0; })) ready.push_back(i);
    }
    const size_t i = ready[r->random() % ready.size()];
    if (r->steps[i]()) {
      r->done[i] = 1;
      --r->left;
      replay_progressed = true;
    }
    return r->left == 0;
  };
}

uint64_t next_seed() { return device().random(); }

}  // namespace cutrain::emu
