// step_graph.h: a training step captured once as a CUDA graph and replayed.
//
// A ResNet-18 step is a few hundred kernel launches; replaying them as one graph takes the CPU's
// launch cost off the critical path. The step must be static (same pointers, no allocation, no
// host synchronisation), which the memory plan guarantees. The first `warmup` calls run eagerly
// (cuDNN and NCCL finish their lazy set-up), the next one captures and launches, the rest replay.
//
// The step's host code runs whenever the step function runs, which is on eager calls, while
// capturing, and while rehearsing (below), so on one call it may run twice or not at all.
// Bookkeeping that must count steps, such as batch norm's num_batches_tracked, belongs after
// replay(), once.
//
// If capturing fails, the reason is printed once and every later step runs eagerly. The call
// that failed runs its step eagerly too, so the device sees each step once. With several ranks
// (`ranks` given), a capture that fails after a collective was captured could leave the ranks'
// collective sequences out of step, so the decision comes first. Every rank rehearses the
// capture with its collectives left out (the step is called with rehearsal = true, captured and
// thrown away), and then all agree, in one all-reduce over `ranks` of the rehearsals that
// failed. If any failed, all fall back to eager steps, with no collective captured. If all succeeded, the
// real capture follows. Should that one still fail (in NCCL's own capture), replay() throws, since
// no rank can tell whether the others' collectives are still in step.
//
// Note [Graph node priorities]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// A graph launches its nodes at the priority of the stream it is launched on, unless it was
// instantiated with cudaGraphInstantiateFlagUseNodePriority: then each kernel node keeps the
// priority of the stream it was captured from. The communicator's stream has the greatest priority
// (dist/ddp/nccl_communicator.h), so that a bucket's all-reduce starts as soon as its gradients are
// ready; without the flag, the replay would lose that.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>

#include "dist/ddp/communicator.h"

namespace cutrain {

// What StepGraph needs of CUDA's graph API on one stream; tests stand in for it without a GPU.
class GraphCapture {
 public:
  virtual ~GraphCapture() = default;
  virtual void begin() = 0;       // start capturing the stream's work (this thread's only)
  virtual std::string end() = 0;  // stop, and instantiate in place of any earlier graph; returns
                                  // "" or why it failed (the stream is then usable again)
  virtual void launch() = 0;      // enqueue the instantiated graph on the stream
};
// `comm`, if given, watches each replay's collectives once it is enqueued (Communicator::watch_replay).
std::unique_ptr<GraphCapture> cuda_graph_capture(cudaStream_t stream, Communicator* comm);

class StepGraph {
 public:
  // One training step; a rehearsal leaves out every collective (TrainStep::rehearse).
  using Step = std::function<void(bool rehearsal)>;

  // A null capture turns graphs off. `ranks` is the communicator of a run of several ranks, else
  // null; every rank then rehearses, and they agree through it.
  explicit StepGraph(std::unique_ptr<GraphCapture> capture, int warmup = 1, Communicator* ranks = nullptr);

  // One step: run eagerly during the warm-up, then captured once, then replayed from the graph.
  // (Trainer::run calls it once a batch; TrainStep::run is the step itself.)
  void replay(const Step& step);

  // "on", "off", or "off (capture failed: ...)".
  std::string status() const;

 private:
  std::string capture(const Step& step, bool rehearsal);  // "" or why it failed
  void fall_back(const std::string& why);
  bool every_rank_ok(bool ok) const;

  std::unique_ptr<GraphCapture> capture_;
  int warmup_;
  Communicator* ranks_;
  int calls_ = 0;
  bool replaying_ = false;
  std::string failure_;
};

}  // namespace cutrain
