// sampler.h: which sample indices a rank visits in an epoch, exactly as PyTorch's
// torch.utils.data.DistributedSampler decides them.
//
//   1. order: shuffled, torch.randperm(n) from a generator seeded with seed + epoch, or 0..n-1.
//      randperm on the CPU for small n is this Fisher-Yates variant over std::mt19937:
//        p = 0..n-1;  for i in 0..n-2: z = gen() % (n - i); swap(p[i], p[i + z])
//      (seed 0, n = 10 gives 4 1 7 5 3 9 0 8 6 2).
//   2. size: without drop_last, pad to total_size = ceil(n / W) * W by repeating the order from
//      its front; with drop_last, cut it to total_size = floor(n / W) * W.
//   3. split: rank r takes order[r], order[r + W], order[r + 2W], ... (num_samples of them).
// Every rank computes the same permutation, so the shards are disjoint (but for the padding)
// and together cover the dataset. Forgetting set_epoch repeats the same order every epoch.
#pragma once

#include <cstdint>
#include <vector>

namespace cutrain {

class DistributedSampler {
 public:
  // Throws std::invalid_argument when world_size < 1, rank is outside [0, world_size), or
  // (with drop_last) the dataset is smaller than the world.
  DistributedSampler(int64_t dataset_size, int world_size, int rank, bool shuffle = true, uint64_t seed = 0,
                     bool drop_last = false);

  void set_epoch(int64_t epoch) { epoch_ = epoch; }

  // This rank's indices for the current epoch, num_samples() of them.
  std::vector<int64_t> indices() const;

  int64_t num_samples() const { return num_samples_; }
  int64_t total_size() const { return num_samples_ * world_size_; }

 private:
  int64_t dataset_size_;
  int world_size_;
  int rank_;
  bool shuffle_;
  uint64_t seed_;
  int64_t epoch_ = 0;
  int64_t num_samples_;
};

// torch.randperm(n) with a CPU generator seeded by `seed` (the algorithm above).
std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed);

}  // namespace cutrain
