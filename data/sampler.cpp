#include "data/sampler.h"

#include <random>
#include <stdexcept>
#include <string>
#include <utility>

namespace cutrain {

std::vector<int64_t> torch_randperm(int64_t n, uint64_t seed) {
  std::mt19937 gen{uint32_t(seed)};  // torch seeds its mt19937 with the low 32 bits
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[i] = i;
  for (int64_t i = 0; i + 1 < n; ++i) {
    int64_t z = int64_t(gen() % uint64_t(n - i));
    std::swap(p[i], p[i + z]);
  }
  return p;
}

DistributedSampler::DistributedSampler(int64_t dataset_size, int world_size, int rank, bool shuffle, uint64_t seed,
                                       bool drop_last)
    : dataset_size_(dataset_size),
      world_size_(world_size),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed) {
  if (dataset_size < 1) throw std::invalid_argument("sampler: the dataset is empty");
  if (world_size < 1) throw std::invalid_argument("sampler: world size " + std::to_string(world_size) + " < 1");
  if (rank < 0 || rank >= world_size)
    throw std::invalid_argument("sampler: rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(world_size) + ")");
  if (drop_last && dataset_size < world_size)
    throw std::invalid_argument("sampler: with drop_last, " + std::to_string(dataset_size) +
                                " samples leave nothing for " + std::to_string(world_size) + " ranks");
  // torch: drop_last and n % W != 0 -> ceil((n - W) / W) = floor(n / W); otherwise ceil(n / W).
  num_samples_ = drop_last ? dataset_size / world_size : (dataset_size + world_size - 1) / world_size;
}

std::vector<int64_t> DistributedSampler::indices() const {
  std::vector<int64_t> order;
  if (shuffle_) {
    order = torch_randperm(dataset_size_, seed_ + uint64_t(epoch_));
  } else {
    order.resize(size_t(dataset_size_));
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  const int64_t total = total_size();
  // Pad by repeating from the front (as often as needed when total > 2n), or cut the tail.
  for (int64_t i = dataset_size_; i < total; ++i) order.push_back(order[i - dataset_size_]);
  order.resize(size_t(total));
  std::vector<int64_t> mine;
  mine.reserve(size_t(num_samples_));
  for (int64_t i = rank_; i < total; i += world_size_) mine.push_back(order[i]);
  return mine;
}

}  // namespace cutrain
