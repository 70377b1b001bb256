#include "data/loader.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <stdexcept>
#include <string>

namespace cutrain {

size_t count_batches(size_t samples, int batch_size, bool drop_last) {
  return drop_last ? samples / size_t(batch_size) : (samples + size_t(batch_size) - 1) / size_t(batch_size);
}

int samples_in_batch(size_t samples, size_t batch, int batch_size) {
  return int(std::min(samples - batch * size_t(batch_size), size_t(batch_size)));
}

AugmentParams loader_augment_params(const Dataset& dataset, const LoaderConfig& config, const std::string& loader) {
  if (config.batch_size < 1) throw std::invalid_argument(loader + ": batch size must be >= 1");
  if (dataset.channels != 3) throw std::invalid_argument(loader + ": images must have 3 channels");
  return make_augment_params(config.augment, dataset.height, dataset.width, config.out_channels);
}

void check_epoch_indices(const std::vector<int64_t>& indices, size_t dataset_size, const std::string& loader) {
  for (size_t i = 0; i < indices.size(); ++i)
    if (indices[i] < 0 || size_t(indices[i]) >= dataset_size)
      throw std::out_of_range(loader + ": index " + std::to_string(indices[i]) + " at position " + std::to_string(i) +
                              " is outside the dataset of " + std::to_string(dataset_size));
}

Loader::Loader(const Dataset& dataset, const LoaderConfig& config)
    : dataset_(dataset), config_(config), params_(loader_augment_params(dataset, config, "loader")) {
  if (config.workers < 1) throw std::invalid_argument("loader: workers must be >= 1");
  if (config.prefetch < 0) throw std::invalid_argument("loader: prefetch must be >= 0");
  slots_.resize(size_t(config.prefetch > 0 ? config.prefetch : 2 * config.workers));
  try {
    for (Slot& slot : slots_) {
      slot.images = allocate(size_t(config.batch_size) * image_elements() * pixel_type_size(config.pixel_type));
      slot.labels = static_cast<int32_t*>(allocate(size_t(config.batch_size) * sizeof(int32_t)));
    }
  } catch (...) {
    release_slots();
    throw;
  }
  for (int w = 0; w < config.workers; ++w) workers_.emplace_back([this] { work(); });
}

Loader::~Loader() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& worker : workers_) worker.join();
  release_slots();
}

size_t Loader::image_elements() const { return size_t(dataset_.height) * dataset_.width * config_.out_channels; }

void* Loader::allocate(size_t bytes) {
  void* memory = std::malloc(bytes);
  if (!memory) throw std::bad_alloc();
  return memory;
}

void Loader::release_slots() {
  for (Slot& slot : slots_)
    for (void* memory : {slot.images, static_cast<void*>(slot.labels)}) std::free(memory);
}

void Loader::start_epoch(std::vector<int64_t> indices, int64_t epoch) {
  check_epoch_indices(indices, dataset_.size(), "loader");
  std::unique_lock lock(mutex_);
  // Stop handing out new work, let batches being filled finish, then start over.
  num_batches_ = 0;
  changed_.wait(lock, [this] {
    for (const Slot& slot : slots_)
      if (slot.state == SlotState::filling) return false;
    return true;
  });
  for (Slot& slot : slots_) slot.state = SlotState::free;
  indices_ = std::move(indices);
  epoch_ = epoch;
  num_batches_ = count_batches(indices_.size(), config_.batch_size, config_.drop_last);
  next_claim_ = next_return_ = 0;
  holding_ = false;
  lock.unlock();
  changed_.notify_all();
}

bool Loader::next(Batch& batch) {
  std::unique_lock lock(mutex_);
  if (holding_) {
    slots_[(next_return_ - 1) % slots_.size()].state = SlotState::free;
    holding_ = false;
    changed_.notify_all();
  }
  if (next_return_ >= num_batches_) return false;
  Slot& slot = slots_[next_return_ % slots_.size()];
  changed_.wait(lock, [&] { return slot.state == SlotState::ready; });
  batch.images = slot.images;
  batch.labels = slot.labels;
  batch.index = int64_t(next_return_);
  batch.size = samples_in_batch(indices_.size(), next_return_, config_.batch_size);
  ++next_return_;
  holding_ = true;
  return true;
}

// A worker claims the next batch once its slot is free (the consumer has moved past the batch
// that used it before), fills it without the lock, and marks it ready.
void Loader::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] {
      return stopping_ || (next_claim_ < num_batches_ && slots_[next_claim_ % slots_.size()].state == SlotState::free);
    });
    if (stopping_) return;
    const size_t batch = next_claim_++;
    Slot& slot = slots_[batch % slots_.size()];
    slot.state = SlotState::filling;
    lock.unlock();
    fill(batch, slot);
    lock.lock();
    slot.state = SlotState::ready;
    changed_.notify_all();
  }
}

void Loader::fill(size_t batch, Slot& slot) {
  gather_augment_cpu(dataset_.images.data(), dataset_.labels.data(), indices_.data() + batch * config_.batch_size,
                     samples_in_batch(indices_.size(), batch, config_.batch_size), epoch_, params_, config_.pixel_type,
                     slot.images, slot.labels);
}

}  // namespace cutrain
