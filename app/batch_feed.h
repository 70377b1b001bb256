// batch_feed.h: puts batch after batch into the model's input and label buffers.
//
// On the CPU, loader threads augment ahead of the step, and the feed copies each ready batch in.
// On the GPU, the uint8 dataset lives on the device, and one kernel gathers and augments each
// batch straight into the input buffer, so there is no host work per step. Either way batch b of
// an epoch holds the same images, bit for bit, because the augmentation is keyed by (seed, epoch,
// sample index).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"

namespace cutrain {

class GpuLoader;
class ResNet18;

class BatchFeed {
 public:
  // `config.batch_size` must be the model's; pixel type and channels are taken from the model.
  BatchFeed(const Dataset& dataset, LoaderConfig config, ResNet18& model);
  ~BatchFeed();

  // Starts an epoch over this rank's `indices`, at batch `first_batch` (a resumed epoch).
  void start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch = 0);
  // Batches in the whole epoch (also those skipped by first_batch).
  int64_t num_batches() const { return num_batches_; }
  // Loads batch `b` (first_batch, first_batch + 1, ... in order) and returns its size.
  int load(int64_t b);

 private:
  ResNet18& model_;
  LoaderConfig config_;
  std::unique_ptr<Loader> cpu_;
  std::unique_ptr<GpuLoader> gpu_;
  int64_t num_batches_ = 0;
};

}  // namespace cutrain
