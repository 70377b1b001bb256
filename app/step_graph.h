// step_graph.h: a training step captured once as a CUDA graph and replayed.
//
// A ResNet-18 step is a few hundred kernel launches; replaying them as one graph takes the CPU's
// launch cost off the critical path. The step must be static (same pointers, no allocation, no
// host synchronisation), which the memory plan guarantees. The first `warmup` calls run eagerly
// (cuDNN and NCCL finish their lazy set-up), the next one captures and launches, the rest replay.
// Host code inside the step (bookkeeping such as BN's num_batches_tracked) runs only on the eager
// and capturing calls: run() says when it did not, so the caller can do it by hand.
// If capturing fails, the reason is printed once and every later step runs eagerly. With several
// ranks, `agree` (when given) tells every rank whether all captures succeeded, and all fall back
// together: whether a collective runs from a graph must be the same on every rank (NCCL's rule).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace cutrain {

class StepGraph {
 public:
  // agree(ok): called by every rank after its capture; true when every rank's was ok.
  StepGraph(cudaStream_t stream, bool enabled, int warmup = 1, std::function<bool(bool ok)> agree = {});
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // Runs one step; returns true if it was a replay (the step's host code did not run).
  bool run(const std::function<void()>& step);

  // "on", "off", or "off (capture failed: ...)".
  std::string status() const;

 private:
  bool capture(const std::function<void()>& step);

  cudaStream_t stream_;
  bool enabled_;
  int warmup_;
  std::function<bool(bool)> agree_;
  int calls_ = 0;
  cudaGraphExec_t exec_ = nullptr;
  std::string failure_;
};

}  // namespace cutrain
