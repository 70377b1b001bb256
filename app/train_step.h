// train_step.h: one training step of DDP's recipe, the one that `cutrain train`, `cutrain
// bench-step` and the step's inventory (`bench-step --plan`) all run. TrainStep::enqueue is the
// step, one call per stage, read top to bottom, and it is the hub: the model, the communicator and
// the optimizer do not call each other, and the step calls each of them directly (Note [The step]
// in app/train_step.cpp). TrainStep::run enqueues it, or replays it from a CUDA graph (Note [The
// step's graph], there too).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/ddp/buckets.h"
#include "dist/ddp/communicator.h"
#include "nn/resnet.h"
#include "nn/sgd.h"

namespace cutrain {

struct TrainStepOptions {
  SgdConfig sgd;
  LrSchedule schedule;
  BucketOptions buckets;
  bool broadcast_buffers = false;  // stage 2, which runs with several ranks only
  bool sync_batchnorm = false;     // SyncBatchNorm over the ranks, with several ranks only
  double clip_grad_norm = 0;       // torch.nn.utils.clip_grad_norm_'s max_norm before SGD; 0: no clipping
};

class GraphCapture;
class StepGraph;

class TrainStep {
 public:
  // comm is null for one process. capture is null to run every step eagerly (on the CPU, and with
  // --cuda-graphs off); else the step is captured through it (cuda_graph_capture below).
  TrainStep(ResNet18& model, Communicator* comm, const TrainStepOptions& options,
            std::unique_ptr<GraphCapture> capture = nullptr);
  ~TrainStep();

  // Enqueues one step on the batch in the model's input: eagerly at first, then captured once and
  // replayed (Note [The step's graph]). Nothing in it waits for the device.
  void run();
  // Whether steps replay a graph: "on", "off", or "off (capture failed: ...)".
  std::string graph_status() const;

  SGD& sgd() { return *sgd_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  // Enqueues Note [The step]. Without collectives, each bucket is updated as with one rank: that
  // is a capture's rehearsal (Note [The step's graph]).
  void enqueue(bool collectives);
  void update(const Bucket& bucket);              // one rank, or a rehearsal
  void reduce(const Bucket& bucket);              // several ranks
  void reduce_then_update(const Bucket& bucket);  // several ranks
  void clip_then_update(bool all_reduce);         // with clipping, after backward

  ResNet18& model_;
  Communicator* comm_;
  bool broadcast_buffers_;
  double clip_grad_norm_;
  std::unique_ptr<SGD> sgd_;
  std::vector<Bucket> buckets_;
  bool collectives_ = true;  // whether the step being enqueued issues collectives (SyncBatchNorm's too)
  std::unique_ptr<StepGraph> graph_;
};

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

// StepGraph makes the decisions of Note [The step's graph] for TrainStep. It takes the step as a
// function so that tests can drive those decisions with a stand-in step and capture.
class StepGraph {
 public:
  // One training step; a rehearsal leaves out every collective (TrainStep::enqueue).
  using Step = std::function<void(bool rehearsal)>;

  // A null capture turns graphs off. `ranks` is the communicator of a run of several ranks, else
  // null; every rank then rehearses, and they agree through it.
  explicit StepGraph(std::unique_ptr<GraphCapture> capture, int warmup = 1, Communicator* ranks = nullptr);

  // One step: run eagerly during the warm-up, then captured once, then replayed from the graph.
  // TrainStep::run calls it once a batch, with TrainStep::enqueue as the step.
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
