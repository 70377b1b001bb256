// train_step.h: one training step of DDP's recipe, as `cutrain train`, `cutrain bench-step` and
// the step's inventory (app/step_plan.h) all take it. Everything is enqueued; nothing allocates or
// waits for the device, so the step can be captured in a CUDA graph (app/step_graph.h):
//
//   1. lr:       this step's learning rate from the device's step counter (nn/sgd.h)
//   2. buffers:  with several ranks and without --sync-bn, batch norm's running statistics
//                broadcast from rank 0 (DDP's broadcast_buffers)
//   3. forward
//   4. backward; as each bucket's gradients become final (nn/parameters.h), at once:
//        one rank:  SGD for the bucket's parameters, on the side stream (no communicator at all)
//        several:   the bucket's gradients gathered into the fp32 buffer, then on the comm stream
//                   its all-reduce (average) and SGD for its parameters (dist/reducer.h)
//   5. the main stream waits for the side and comm streams: the next step sees every update
//
// The buckets are DDP's (1 MiB first, then --bucket-cap-mb, parameters in backward order) with
// one rank too, where they only group the optimizer's launches: one per bucket (three for
// ResNet-18) rather than one per parameter (62), and each right after its last gradient rather
// than after the whole backward. NVTX ranges name the parts (kernels/nvtx_range.h).
#pragma once

#include <memory>
#include <vector>

#include "dist/communicator.h"
#include "dist/reducer.h"
#include "nn/resnet.h"
#include "nn/sgd.h"

namespace cutrain {

struct TrainStepOptions {
  SgdConfig sgd;
  LrSchedule schedule;
  ReducerOptions buckets;
  bool broadcast_buffers = false;  // step 2 (several ranks only)
};

class TrainStep {
 public:
  // comm: null for one process.
  TrainStep(ResNet18& model, Communicator* comm, const TrainStepOptions& options);

  // Enqueues one step on the batch in the model's input. collectives = false leaves out every
  // collective, SGD then running as with one rank (StepGraph's rehearsal of a capture).
  void run(bool collectives = true);

  SGD& sgd() { return *sgd_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  void grads_ready(int64_t ready_end);  // one rank (or a rehearsal): SGD for each complete bucket
  void update_beside(const Bucket& bucket);

  ResNet18& model_;
  Communicator* comm_;
  bool broadcast_buffers_;
  std::unique_ptr<SGD> sgd_;
  std::vector<Bucket> buckets_;
  size_t next_bucket_ = 0;
  std::unique_ptr<GradReducer> reducer_;  // several ranks
};

}  // namespace cutrain
