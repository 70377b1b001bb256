// sgd.cpp: the CPU reference of sgd.h, the shared update of sgd.cuh element by element, in
// blocks of elements on the threads of cpu_threads.h (each element's update is its own).
#include "kernels/sgd.h"

#include <algorithm>

#include "kernels/base/cpu_threads.h"
#include "kernels/sgd.cuh"

namespace cutrain {

void sgd_update_cpu(float* param, float* momentum, const SgdSegment* segments, int count, const float* lr,
                    SgdConfig cfg) {
  const float rate = *lr;
  constexpr int64_t kBlock = 16384;
  for (int s = 0; s < count; ++s) {
    const SgdSegment& segment = segments[s];
    parallel_for((segment.numel + kBlock - 1) / kBlock, [&](int64_t block) {
      const int64_t end = std::min(segment.numel, (block + 1) * kBlock);
      for (int64_t i = block * kBlock; i < end; ++i) sgd_update_element(param, momentum, segment, i, rate, cfg);
    });
  }
}

}  // namespace cutrain
