// graph.cpp: stream capture and CUDA graphs for the emulation (runtime.h).
//
// A captured stream adds a node for each operation instead of running it (stream_scheduler.h's
// enqueue_op): a kernel node for a kernel and for a library's work (enqueue, enqueue_until), a
// memset node, a memcpy node. Event records and waits inside the capture make no node; they make
// edges, as CUDA's capture does: the node after a wait follows the nodes before the record. A
// stream that waits for an event recorded in the capture joins it (a fork) and must be joined
// back into the origin stream before cudaStreamEndCapture. cudaGraphLaunch replays the nodes as
// one operation of its stream, in a seeded order that the edges allow.
#include <algorithm>
#include <set>

#include "emu/runtime.h"
#include "emu/stream_scheduler.h"

struct CUgraphExec_st {
  std::shared_ptr<const std::vector<cutrain::emu::GraphNode>> nodes;
};

using cutrain::emu::lock_device;

namespace {

cudaError_t fail(cudaError_t error) { return cutrain::emu::set_last_error(error); }

// The nodes that `tail` follows, directly or not, and `tail` itself.
std::set<size_t> ancestors(const CUgraph_st& graph, const std::vector<size_t>& tail) {
  std::set<size_t> seen;
  std::vector<size_t> todo = tail;
  while (!todo.empty()) {
    const size_t n = todo.back();
    todo.pop_back();
    if (!seen.insert(n).second) continue;
    for (size_t d : graph.nodes[n]->node.deps) todo.push_back(d);
  }
  return seen;
}

// Whether every stream that joined the capture was joined back into its origin.
bool joined(const cutrain::emu::Capture& c) {
  const std::set<size_t> origin = ancestors(*c.graph, c.origin->capture_tail);
  for (cudaStream_t s : c.streams)
    for (size_t n : s->capture_tail)
      if (!origin.count(n)) return false;
  return true;
}

}  // namespace

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (s == cutrain::emu::find_stream(nullptr)) return fail(cudaErrorStreamCaptureUnsupported);
  if (s->capture) return fail(cudaErrorIllegalState);
  cutrain::emu::begin_capture(s, mode);
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  cutrain::emu::Capture* c = s->capture;
  if (!c) return fail(cudaErrorIllegalState);
  if (c->origin != s) return fail(cudaErrorStreamCaptureUnmatched);
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  cudaError_t error = cudaSuccess;
  if (c->invalidated != cudaSuccess) {
    error = cudaErrorStreamCaptureInvalidated;
  } else if (!joined(*c)) {
    error = cudaErrorStreamCaptureUnjoined;
  }
  std::unique_ptr<CUgraph_st> captured = cutrain::emu::end_capture(c);
  if (error != cudaSuccess) return fail(error);
  *graph = captured.release();
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (s == cutrain::emu::find_stream(nullptr)) {
    if (const cudaError_t error = cutrain::emu::capture_check(cutrain::emu::Use::synchronise, s)) return fail(error);
  }
  if (!s->capture) {
    *status = cudaStreamCaptureStatusNone;
  } else {
    *status =
        s->capture->invalidated != cudaSuccess ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
  }
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  if (!graph || (flags & ~0xfull)) return fail(cudaErrorInvalidValue);
  auto nodes = std::make_shared<std::vector<cutrain::emu::GraphNode>>();
  for (const auto& n : graph->nodes) nodes->push_back(n->node);
  *exec = new CUgraphExec_st{std::move(nodes)};
  return cudaSuccess;
}

// Each kernel node is checked as its launch would be now: against the kernel's dynamic shared
// memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize) at this moment, not at capture.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (!exec) return fail(cudaErrorInvalidValue);
  for (const cutrain::emu::GraphNode& n : *exec->nodes) {
    if (n.type != cudaGraphNodeTypeKernel || !n.function) continue;
    const cutrain::emu::Grid g{
        n.name.c_str(), n.grid,  n.block, n.dynamic_shared_bytes, cutrain::emu::max_dynamic_shared_bytes(n.function),
        n.cooperative,  nullptr, nullptr};
    if (const cudaError_t error = cutrain::emu::check_grid(g)) return fail(error);
  }
  auto lock = lock_device();
  CUstream_st* s = cutrain::emu::find_stream(stream);
  if (!s) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t error = cutrain::emu::capture_check(cutrain::emu::Use::enqueue, s)) return fail(error);
  if (s->capture) return fail(cudaErrorStreamCaptureUnsupported);  // no child graphs
  cutrain::emu::enqueue_op(lock, s, "cudaGraphLaunch",
                           cutrain::emu::replay_step(exec->nodes, cutrain::emu::next_seed()));
  return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (!graph || !count) return fail(cudaErrorInvalidValue);
  if (!nodes) {
    *count = graph->nodes.size();
    return cudaSuccess;
  }
  const size_t n = std::min(*count, graph->nodes.size());
  for (size_t i = 0; i < *count; ++i) nodes[i] = i < n ? graph->nodes[i].get() : nullptr;
  *count = n;
  return cudaSuccess;
}

cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node) return fail(cudaErrorInvalidValue);
  *type = node->node.type;
  return cudaSuccess;
}

cudaError_t cudaGraphKernelNodeGetParams(cudaGraphNode_t node, cudaKernelNodeParams* params) {
  if (!node || node->node.type != cudaGraphNodeTypeKernel || !node->node.function) return fail(cudaErrorInvalidValue);
  const cutrain::emu::GraphNode& n = node->node;
  *params = cudaKernelNodeParams{const_cast<void*>(n.function),    n.grid,  n.block,
                                 unsigned(n.dynamic_shared_bytes), nullptr, nullptr};
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;  // a launch still pending holds its own share of the nodes
  return cudaSuccess;
}
