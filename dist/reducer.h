// reducer.h: DistributedDataParallel's bucketed gradient all-reduce, overlapped with backward.
//
// All gradients live in one flat fp32 buffer laid out in the order backward produces them (the
// last layer's first), so a bucket is a contiguous span and needs no copies in or out.
//
//   GradReducer reducer(*comm, grads, param_sizes, {.bucket_cap_mb = 25}, hooks);
//   reducer.begin_backward();
//   for each layer, last to first:
//     layer.backward(...);                    // writes its weight gradients
//     reducer.grads_ready(end_of_its_grads);  // flat grads [0, end) are final
//   reducer.finish();                         // later work sees every bucket averaged
//
// Hooks put work around each bucket's all-reduce: `before` on the caller's stream just before it
// (the trainer gathers the bucket's gradients into the fp32 buffer), `after` on the
// communicator's queue right behind it (the trainer's optimizer updates the bucket's parameters
// there, while backward goes on: app/train_step.h).
//
// Design notes
// - Buckets follow DDP: parameters are never split; a bucket closes once it holds at least its cap;
//   the first bucket's cap is 1 MiB so communication starts early, the others' 25 MiB. A cap of 0
//   gives one bucket per parameter; a cap that holds every gradient, a single bucket.
// - Buckets are launched strictly in bucket order (every rank must issue the same collectives in
//   the same order), each as soon as backward has written its last gradient. The communicator runs
//   them on its own stream (NCCL) or thread (Gloo) while backward goes on; finish() launches what
//   is left and makes the caller's next work wait for all of them, without a host sync on the GPU.
// - Gradients are averaged over the world size, as DDP does.
// - The reducer allocates nothing per step (its plan is made once), and on the GPU nothing in a step
//   waits on the host, so a step can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "dist/communicator.h"

namespace cutrain {

// A span [begin, end) of the flat gradient buffer, in elements, holding parameters
// [param_begin, param_end) in flat order.
struct Bucket {
  int64_t begin = 0;
  int64_t end = 0;
  int param_begin = 0;
  int param_end = 0;
};

// DDP's bucket assignment over parameters of `param_sizes` elements of `elem_bytes` each, in flat
// order. The first bucket closes at min(first_cap_bytes, cap_bytes), the others at cap_bytes; when
// every gradient fits in cap_bytes there is one bucket. Throws on a parameter of size 0.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_sizes, int64_t elem_bytes, int64_t cap_bytes,
                                 int64_t first_cap_bytes);

struct ReducerOptions {
  double bucket_cap_mb = 25;   // --bucket-cap-mb, as DDP's bucket_cap_mb (MiB)
  double first_bucket_mb = 1;  // DDP's first bucket
};

// The buckets DDP would make of the flat gradients of parameters of `param_sizes` floats each.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_sizes, const ReducerOptions& options);

struct BucketHooks {
  std::function<void(const Bucket&)> before;
  std::function<void(const Bucket&, cudaStream_t)> after;
};

class GradReducer {
 public:
  // `grads` (device memory for NCCL, host for Gloo) holds sum(param_sizes) floats, in flat order.
  GradReducer(Communicator& comm, float* grads, const std::vector<int64_t>& param_sizes,
              const ReducerOptions& options = {}, BucketHooks hooks = {});

  // Starts a step: no bucket is launched yet.
  void begin_backward();
  // Flat grads [0, ready_end) are final: launch every bucket now complete, in order.
  void grads_ready(int64_t ready_end);
  // Launch the remaining buckets; the caller's next work sees every gradient averaged.
  void finish();

  const std::vector<Bucket>& buckets() const { return buckets_; }

 private:
  Communicator& comm_;
  float* grads_;
  std::vector<Bucket> buckets_;
  BucketHooks hooks_;
  size_t next_bucket_ = 0;  // the first bucket not yet launched this step
};

}  // namespace cutrain
