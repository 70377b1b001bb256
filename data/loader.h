// loader.h: CPU worker threads that turn a rank's sample order into ready, augmented batches.
//
//   Loader loader(train_set, LoaderConfig{.batch_size = 128});
//   loader.start_epoch(sampler.indices(), epoch);
//   Batch batch;
//   while (loader.next(batch)) { ... batch.images (NHWC), batch.labels, batch.size ... }
//
// Design: a ring of `prefetch` batch slots. Batch b always goes to slot b % prefetch. Workers
// claim batch numbers in increasing order, wait until their slot is free, fill it with
// gather_augment_cpu (kernels/augment.h) and mark it ready; next() hands out the slots strictly
// in batch order and frees the previous one. The output depends only on (indices, epoch, seed),
// never on the number of workers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "kernels/augment.h"

namespace cutrain {

// How batches look; GpuLoader (data/gpu_loader.h) reads the same struct but workers and prefetch.
struct LoaderConfig {
  int batch_size = 128;
  int workers = 4;
  AugmentConfig augment;  // augment.train = false: normalise only (evaluation)
  PixelType pixel_type = PixelType::f32;
  int out_channels = 3;   // >= 3; the extra channels are zeros
  bool drop_last = true;  // drop the last partial batch (training); keep it (evaluation)
  int prefetch = 0;       // slots in the ring; 0 means 2 * workers
};

// One batch, valid until the next call to next() or start_epoch(). An asynchronous copy from
// `images` must have completed (e.g. cudaStreamSynchronize or an event) before that call.
struct Batch {
  const void* images = nullptr;  // size x H x W x out_channels, fp32 or bf16
  const int32_t* labels = nullptr;
  int size = 0;       // batch_size, or fewer for a kept last batch
  int64_t index = 0;  // position in the epoch, from 0
};

// Batches in an epoch of `samples` samples.
size_t count_batches(size_t samples, int batch_size, bool drop_last);

// Samples in batch `batch` of that epoch: batch_size, or fewer for a kept last batch.
int samples_in_batch(size_t samples, size_t batch, int batch_size);

// What both loaders check of their config (batch_size >= 1, 3-channel images) and the augmentation
// parameters for the dataset's image size. Throws std::invalid_argument starting with `loader`.
AugmentParams loader_augment_params(const Dataset& dataset, const LoaderConfig& config, const std::string& loader);

// Throws std::out_of_range starting with `loader`, naming the index and its position, for an
// index outside [0, dataset_size).
void check_epoch_indices(const std::vector<int64_t>& indices, size_t dataset_size, const std::string& loader);

class Loader {
 public:
  // Throws std::invalid_argument for a bad config. The dataset must outlive the loader.
  Loader(const Dataset& dataset, const LoaderConfig& config);
  ~Loader();  // stops and joins the workers
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Starts an epoch over `indices` (this rank's sampler order), abandoning any unfinished one.
  // Throws std::out_of_range for an index outside the dataset.
  void start_epoch(std::vector<int64_t> indices, int64_t epoch);

  // The next batch in order; false when the epoch is over.
  bool next(Batch& batch);

  size_t num_batches() const { return num_batches_; }
  size_t image_elements() const;  // H * W * out_channels

 private:
  enum class SlotState { free, filling, ready };
  struct Slot {
    void* images = nullptr;
    int32_t* labels = nullptr;
    SlotState state = SlotState::free;
  };

  void work();
  void fill(size_t batch, Slot& slot);
  void* allocate(size_t bytes);
  void release_slots();

  const Dataset& dataset_;
  LoaderConfig config_;
  AugmentParams params_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Slot> slots_;
  std::vector<int64_t> indices_;
  int64_t epoch_ = 0;
  size_t num_batches_ = 0;
  size_t next_claim_ = 0;   // the next batch a worker will fill
  size_t next_return_ = 0;  // the next batch next() hands out
  bool holding_ = false;    // next() handed out batch next_return_ - 1, not yet freed
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace cutrain
