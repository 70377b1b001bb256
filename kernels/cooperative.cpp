#include "kernels/cooperative.h"

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>

#include "kernels/base/check.h"

namespace cutrain {

void raise_dynamic_shared_limit(const void* kernel, size_t bytes) {
  static std::mutex mutex;
  static std::map<const void*, size_t> limits;  // what each kernel has been given so far
  std::lock_guard lock(mutex);
  size_t& limit = limits[kernel];
  if (bytes <= limit) return;
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  limit = bytes;
}

void check_cooperative_grid_fits(const char* name, const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  int device = 0, multiprocessors = 0, per_multiprocessor = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, device));
  const int threads = int(block.x * block.y * block.z);
  CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_multiprocessor, kernel, threads, shared_bytes));
  const long long blocks = (long long)grid.x * grid.y * grid.z;
  const long long resident = (long long)per_multiprocessor * multiprocessors;
  if (blocks > resident)
    throw std::runtime_error(std::string(name) + ": a cooperative grid of " + std::to_string(blocks) + " blocks of " +
                             std::to_string(threads) + " threads with " + std::to_string(shared_bytes) +
                             " bytes of shared memory cannot be resident at once on this GPU (" +
                             std::to_string(per_multiprocessor) + " per multiprocessor x " +
                             std::to_string(multiprocessors) + " multiprocessors)");
}

}  // namespace cutrain
