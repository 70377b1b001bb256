// train_step.h: one training step of DDP's recipe, the one that `cutrain train`, `cutrain
// bench-step` and the step's inventory (`bench-step --plan`) all run. TrainStep::enqueue is the
// step, one call per stage, read top to bottom, and it is the hub: the model, the communicator and
// the optimizer do not call each other, and the step calls each of them directly. TrainStep::run
// enqueues it, or replays it from a CUDA graph.
//
// Note [The step]
// ~~~~~~~~~~~~~~~
// The batch is already in the model's input. Then, on every rank at once:
//   1. lr:        this step's learning rate, computed on the device from its step counter.
//   2. buffers:   with several ranks and without --sync-bn, batch norm's running statistics are
//                 broadcast from rank 0, as DDP's broadcast_buffers does.
//   3. forward:   ResNet-18 and the softmax cross-entropy loss.
//   4. backward:  gradients into the flat buffer, one layer at a time from the last
//                 (Note [ResNet-18's layer table] in nn/resnet_layout.h). After each layer, every
//                 bucket whose gradients are now all final goes out, in bucket order, while
//                 backward goes on:
//                   one rank:  SGD for the bucket's parameters, on the side stream;
//                   several:   the bucket's gradients gathered into the fp32 buffer on the main
//                              stream, then on the communicator's stream the bucket's all-reduce
//                              (an average over the ranks) and right behind it SGD for its
//                              parameters.
//   5. join:      the main stream waits for the side stream, or for the communicator's stream,
//                 so that the next step sees every update. On the CPU, where Gloo's all-reduces
//                 run on a thread of their own and have no stream to queue SGD behind, SGD runs
//                 here, bucket by bucket, once the all-reduces are done.
// With --clip-grad-norm, every update needs the norm of the whole gradient, after the ranks'
// average, so stage 4 sends the buckets' all-reduces out as above but updates nothing, and stage 5
// is, on the main stream once every all-reduce is done (torchvision's clip_grad_norm_ between
// backward and optimizer.step()):
//   5. clip:      the gradient's total norm and from it the clip factor, on the device, into
//                 device memory (SGD::clip_grad_norm);
//      update:    SGD for every parameter, in one launch, on the gradients times that factor.
// Every rank issues the same collectives in the same order, which is what keeps the ranks'
// queues in step. Everything is enqueued, and nothing allocates or waits for the device, so on
// the GPU the trainer captures the step once as a CUDA graph and replays it.
//
// With one rank the buckets are planned all the same (1 MiB first, then --bucket-cap-mb, with the
// parameters in backward order), but there they only group the optimizer's launches. There is one
// launch per bucket (three for ResNet-18) rather than one per parameter (62), each right after the
// bucket's last gradient rather than after the whole backward. Which work runs on which stream is
// Note [Side stream] in nn/context.h. NVTX ranges name the parts of the step for Nsight Systems.
//
// On the GPU, TrainStep::run also captures the step as a CUDA graph and replays it: Note [The
// step's graph] below.
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
  // is the rehearsal of a capture on several ranks, captured and thrown away to learn whether a
  // capture would succeed before any collective is captured.
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

// Note [The step's graph]
// ~~~~~~~~~~~~~~~~~~~~~~~
// A ResNet-18 step is a few hundred kernel launches; replaying them as one graph takes the CPU's
// launch cost off the critical path. The step must be static (same pointers, no allocation, no
// host synchronisation), which the memory plan guarantees. The first `warmup` calls run eagerly
// (cuDNN and NCCL finish their lazy set-up), the next one captures and launches, the rest replay.
//
// The step's host code runs whenever the step function runs, which is on eager calls, while
// capturing, and while rehearsing (below), so on one call it may run twice or not at all.
// Bookkeeping that must count steps, such as batch norm's num_batches_tracked, belongs after
// TrainStep::run, once, which is where the trainer keeps it.
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
