#include "data/gpu_loader.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/base/check.h"

namespace cutrain {

GpuLoader::GpuLoader(const Dataset& dataset, const LoaderConfig& config)
    : config_(config), params_(loader_augment_params(dataset, config, "gpu loader")), dataset_size_(dataset.size()) {
  CUDA_CHECK(cudaMalloc(&images_, dataset.images.size()));
  CUDA_CHECK(cudaMalloc(&labels_, dataset.labels.size() * sizeof(int32_t)));
  CUDA_CHECK(cudaMalloc(&indices_, dataset_size_ * sizeof(int64_t)));
  CUDA_CHECK(cudaHostAlloc(&staging_, dataset_size_ * sizeof(int64_t), cudaHostAllocDefault));
  CUDA_CHECK(cudaMemcpy(images_, dataset.images.data(), dataset.images.size(), cudaMemcpyHostToDevice));
  CUDA_CHECK(
      cudaMemcpy(labels_, dataset.labels.data(), dataset.labels.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  // A copy from pageable memory may still be landing when cudaMemcpy returns, and the caller's
  // non-blocking streams do not wait for the default stream: wait here, once.
  CUDA_CHECK(cudaDeviceSynchronize());
}

GpuLoader::~GpuLoader() {
  // In a destructor a failure cannot be reported; the memory goes with the context anyway.
  cudaFree(images_);
  cudaFree(labels_);
  cudaFree(indices_);
  cudaFreeHost(staging_);
}

void GpuLoader::start_epoch(const std::vector<int64_t>& indices, int64_t epoch, cudaStream_t stream) {
  if (indices.size() > dataset_size_)
    throw std::invalid_argument("gpu loader: " + std::to_string(indices.size()) + " indices for an epoch, at most " +
                                std::to_string(dataset_size_) + " (the dataset size)");
  check_epoch_indices(indices, dataset_size_, "gpu loader");
  // Kernels of the previous epoch on `stream` may still read indices_: the copy queues behind
  // them, and the wait keeps staging_ untouched until the copy has read it.
  std::memcpy(staging_, indices.data(), indices.size() * sizeof(int64_t));
  CUDA_CHECK(cudaMemcpyAsync(indices_, staging_, indices.size() * sizeof(int64_t), cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  epoch_samples_ = indices.size();
  epoch_ = epoch;
  num_batches_ = count_batches(epoch_samples_, config_.batch_size, config_.drop_last);
}

int GpuLoader::batch_size(size_t batch) const {
  if (batch >= num_batches_)
    throw std::out_of_range("gpu loader: batch " + std::to_string(batch) + " of an epoch of " +
                            std::to_string(num_batches_));
  return samples_in_batch(epoch_samples_, batch, config_.batch_size);
}

void GpuLoader::load_batch(size_t batch, void* out_images, int32_t* out_labels, cudaStream_t stream) const {
  gather_augment_cuda(images_, labels_, indices_ + batch * config_.batch_size, batch_size(batch), epoch_, params_,
                      config_.pixel_type, out_images, out_labels, stream);
}

}  // namespace cutrain
