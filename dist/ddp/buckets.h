// buckets.h: DistributedDataParallel's gradient buckets.
//
// All gradients live in one flat fp32 buffer, laid out in the order in which backward produces
// them (the last layer's first), so a bucket is a contiguous span of it and needs no copies in or
// out. The training step all-reduces each bucket as soon as backward has written its last
// gradient, overlapped with the rest of backward (Note [The step] in app/train_step.cpp).
//
// The buckets follow DDP's rule. Parameters are never split, and a bucket closes once it holds at
// least its cap. The first bucket's cap is 1 MiB, so that communication starts early, and the
// others' is 25 MiB. A cap of 0 gives one bucket per parameter, and a cap that holds every
// gradient gives a single bucket.
#pragma once

#include <cstdint>
#include <vector>

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

struct BucketOptions {
  double bucket_cap_mb = 25;   // --bucket-cap-mb, as DDP's bucket_cap_mb (MiB)
  double first_bucket_mb = 1;  // DDP's first bucket
};

// The buckets DDP would make of the flat gradients of parameters of `param_sizes` floats each.
std::vector<Bucket> plan_buckets(const std::vector<int64_t>& param_sizes, const BucketOptions& options);

}  // namespace cutrain
