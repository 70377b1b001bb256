#include "app/step_graph.h"

#include <cstdio>
#include <exception>
#include <utility>

#include "kernels/check.h"

namespace cutrain {

StepGraph::StepGraph(cudaStream_t stream, bool enabled, int warmup, std::function<bool(bool ok)> agree)
    : stream_(stream), enabled_(enabled && stream != nullptr), warmup_(warmup), agree_(std::move(agree)) {}

StepGraph::~StepGraph() {
  if (exec_) cudaGraphExecDestroy(exec_);
}

bool StepGraph::run(const std::function<void()>& step) {
  if (exec_) {
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    return true;
  }
  if (enabled_ && calls_++ >= warmup_ && capture(step)) {
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    return false;  // the step's host code ran while capturing
  }
  step();
  return false;
}

bool StepGraph::capture(const std::function<void()>& step) {
  // Thread-local mode: other threads (NCCL's watchdog, loader threads) may keep calling CUDA.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    step();
  } catch (const std::exception& e) {
    failure_ = e.what();
  }
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (failure_.empty() && end != cudaSuccess) failure_ = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(end);
  if (failure_.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec_, graph, 0);
    if (made != cudaSuccess) failure_ = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
  }
  if (graph) cudaGraphDestroy(graph);
  if (agree_ && !agree_(failure_.empty()) && failure_.empty()) failure_ = "another rank's capture failed";
  if (failure_.empty()) return true;

  cudaGetLastError();  // clear the capture's error; the stream is usable again
  if (exec_) cudaGraphExecDestroy(exec_);
  exec_ = nullptr;
  enabled_ = false;
  std::fprintf(stderr, "cutrain: warning: CUDA graph capture failed, running steps eagerly: %s\n", failure_.c_str());
  return false;
}

std::string StepGraph::status() const {
  if (!failure_.empty()) return "off (capture failed: " + failure_ + ")";
  return enabled_ ? "on" : "off";
}

}  // namespace cutrain
