#include "app/step_graph.h"

#include <cstdio>
#include <exception>
#include <stdexcept>
#include <utility>

#include "kernels/base/check.h"

namespace cutrain {
namespace {

class CudaGraphCapture final : public GraphCapture {
 public:
  CudaGraphCapture(cudaStream_t stream, Communicator* comm) : stream_(stream), comm_(comm) {}
  ~CudaGraphCapture() override {
    if (exec_) cudaGraphExecDestroy(exec_);
  }

  // The thread-local mode lets other threads (NCCL's watchdog, the loader's) keep calling CUDA.
  void begin() override { CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal)); }

  std::string end() override {
    cudaGraph_t graph = nullptr;
    std::string failure;
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (ended != cudaSuccess) failure = std::string("cudaStreamEndCapture: ") + cudaGetErrorString(ended);
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
    if (failure.empty()) {
      const cudaError_t made = cudaGraphInstantiate(&exec_, graph, cudaGraphInstantiateFlagUseNodePriority);
      if (made != cudaSuccess) failure = std::string("cudaGraphInstantiate: ") + cudaGetErrorString(made);
    }
    if (graph) cudaGraphDestroy(graph);
    if (!failure.empty()) {
      cudaGetLastError();  // clear the capture's error; the stream is usable again
      exec_ = nullptr;
    }
    return failure;
  }

  void launch() override {
    CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
    if (comm_) comm_->watch_replay(stream_);
  }

 private:
  cudaStream_t stream_;
  Communicator* comm_;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace

std::unique_ptr<GraphCapture> cuda_graph_capture(cudaStream_t stream, Communicator* comm) {
  return std::make_unique<CudaGraphCapture>(stream, comm);
}

StepGraph::StepGraph(std::unique_ptr<GraphCapture> capture, int warmup, Communicator* ranks)
    : capture_(std::move(capture)), warmup_(warmup), ranks_(ranks) {}

void StepGraph::replay(const Step& step) {
  if (replaying_) return capture_->launch();
  if (!capture_ || !failure_.empty() || calls_++ < warmup_) return step(/*rehearsal=*/false);
  if (ranks_) {  // with several ranks, decide before any collective is captured
    std::string rehearsal = capture(step, /*rehearsal=*/true);
    if (!every_rank_ok(rehearsal.empty()) && rehearsal.empty()) rehearsal = "another rank's capture failed";
    if (!rehearsal.empty()) {
      fall_back(rehearsal);
      return step(/*rehearsal=*/false);
    }
  }
  const std::string failure = capture(step, /*rehearsal=*/false);
  if (failure.empty()) {
    replaying_ = true;
    return capture_->launch();
  }
  if (ranks_)
    throw std::runtime_error("CUDA graph capture failed after every rank's rehearsal succeeded (" + failure +
                             "); the ranks' collectives may be out of step: run with --cuda-graphs off");
  fall_back(failure);
  step(/*rehearsal=*/false);
}

std::string StepGraph::capture(const Step& step, bool rehearsal) {
  capture_->begin();
  std::string failure;
  try {
    step(rehearsal);
  } catch (const std::exception& e) {
    failure = e.what();
  }
  const std::string ended = capture_->end();  // always, since the stream must leave capture mode
  return failure.empty() ? ended : failure;
}

bool StepGraph::every_rank_ok(bool ok) const {
  double failed = ok ? 0.0 : 1.0;
  ranks_->all_reduce_host(&failed, 1, ReduceOp::sum);
  return failed == 0.0;
}

void StepGraph::fall_back(const std::string& why) {
  failure_ = why;
  std::fprintf(stderr, "cutrain: warning: CUDA graph capture failed, running steps eagerly: %s\n", why.c_str());
}

std::string StepGraph::status() const {
  if (!failure_.empty()) return "off (capture failed: " + failure_ + ")";
  return capture_ ? "on" : "off";
}

}  // namespace cutrain
