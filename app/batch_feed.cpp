#include "app/batch_feed.h"

#include <cstring>
#include <stdexcept>

#include "data/gpu_loader.h"
#include "nn/resnet.h"

namespace cutrain {

BatchFeed::BatchFeed(const Dataset& dataset, LoaderConfig config, ResNet18& model) : model_(model), config_(config) {
  config_.out_channels = model.input_channels();
  config_.pixel_type = model.context().dtype() == DType::bf16 ? PixelType::bf16 : PixelType::f32;
  if (model.context().on_gpu())
    gpu_ = std::make_unique<GpuLoader>(dataset, config_);
  else
    cpu_ = std::make_unique<Loader>(dataset, config_);
}

BatchFeed::~BatchFeed() = default;

void BatchFeed::start_epoch(std::vector<int64_t> indices, int64_t epoch, int64_t first_batch) {
  num_batches_ = int64_t(count_batches(indices.size(), config_.batch_size, config_.drop_last));
  if (gpu_) {
    gpu_->start_epoch(indices, epoch, model_.context().main_stream());
    return;
  }
  // The CPU loader starts at the first batch still to run, so the skipped samples are never
  // augmented.
  const size_t skip = std::min(indices.size(), size_t(first_batch) * size_t(config_.batch_size));
  indices.erase(indices.begin(), indices.begin() + skip);
  cpu_->start_epoch(std::move(indices), epoch);
}

int BatchFeed::load(int64_t b) {
  const Tensor& input = model_.input();
  int32_t* labels = model_.labels().as<int32_t>();
  if (gpu_) {
    gpu_->load_batch(size_t(b), input.data, labels, model_.context().main_stream());
    return gpu_->batch_size(size_t(b));
  }
  Batch batch;
  if (!cpu_->next(batch)) throw std::logic_error("BatchFeed: the loader ran out of batches before the epoch's end");
  const size_t image_bytes = input.bytes() / size_t(input.dim(0));
  std::memcpy(input.data, batch.images, size_t(batch.size) * image_bytes);
  std::memcpy(labels, batch.labels, size_t(batch.size) * sizeof(int32_t));
  return batch.size;
}

}  // namespace cutrain
