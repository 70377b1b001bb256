// gpu_loader.h: the input pipeline on the GPU. The uint8 dataset (150 MiB for CIFAR-10) and its
// labels are uploaded once; each step then gathers and augments one batch in a single kernel
// (gather_augment_cuda, kernels/augment.h), straight into the model's input buffer.
//
//   GpuLoader loader(train_set, config);                 // uploads the dataset
//   loader.start_epoch(sampler.indices(), epoch, stream); // uploads the epoch's order, once
//   for (size_t b = 0; b < loader.num_batches(); ++b)
//     loader.load_batch(b, input, labels, stream);        // one kernel; no copy, no allocation
//
// The output is the CPU Loader's, bit for bit in fp32 (same indices, epoch and config): both use
// the per-pixel math of kernels/augment.cuh. load_batch never synchronises, so it may be
// recorded into a CUDA graph (as a node with that batch's offset baked in).
#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "data/dataset.h"
#include "data/loader.h"

namespace cutrain {

class GpuLoader {
 public:
  // Uses config's batch_size, augment, pixel_type, out_channels and drop_last. Allocates the
  // device copies (dataset, labels, room for one epoch of indices) and a pinned staging buffer.
  GpuLoader(const Dataset& dataset, const LoaderConfig& config);
  ~GpuLoader();
  GpuLoader(const GpuLoader&) = delete;
  GpuLoader& operator=(const GpuLoader&) = delete;

  // Checks `indices` against the dataset and copies them to the device on `stream`, then waits
  // for that copy (once per epoch, outside any step). At most dataset.size() indices.
  void start_epoch(const std::vector<int64_t>& indices, int64_t epoch, cudaStream_t stream);

  size_t num_batches() const { return num_batches_; }
  int batch_size(size_t batch) const;  // batch_size, or fewer for a kept last batch

  // Writes batch `batch` of the epoch: out_images (batch_size(batch) x H x W x out_channels,
  // fp32 or bf16) and out_labels, device memory, on `stream`.
  void load_batch(size_t batch, void* out_images, int32_t* out_labels, cudaStream_t stream) const;

 private:
  LoaderConfig config_;
  AugmentParams params_;
  size_t dataset_size_ = 0;
  uint8_t* images_ = nullptr;   // device, N x H x W x 3
  int32_t* labels_ = nullptr;   // device, N
  int64_t* indices_ = nullptr;  // device, room for N
  int64_t* staging_ = nullptr;  // pinned host, room for N
  size_t epoch_samples_ = 0;
  int64_t epoch_ = 0;
  size_t num_batches_ = 0;
};

}  // namespace cutrain
