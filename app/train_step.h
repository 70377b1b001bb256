// train_step.h: one training step of DDP's recipe, the one that `cutrain train`, `cutrain
// bench-step` and the step's inventory (`bench-step --plan`) all run. TrainStep::run is the step,
// one call per stage, read top to bottom, and it is the hub: the model, the communicator and the
// optimizer do not call each other, and the step calls each of them directly.
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
#pragma once

#include <memory>
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

class TrainStep {
 public:
  // comm is null for one process.
  TrainStep(ResNet18& model, Communicator* comm, const TrainStepOptions& options);

  // Enqueues one step on the batch in the model's input.
  void run() { enqueue(/*collectives=*/true); }
  // Enqueues the same step without any collective, each bucket updated as with one rank: what
  // StepGraph captures and throws away on several ranks, to learn whether a capture would succeed
  // before any collective is captured (app/step_graph.h).
  void rehearse() { enqueue(/*collectives=*/false); }

  SGD& sgd() { return *sgd_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
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
};

}  // namespace cutrain
