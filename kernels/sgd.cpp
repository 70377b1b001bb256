// sgd.cpp: the CPU reference of sgd.h, the shared update of sgd.cuh element by element.
#include "kernels/sgd.h"

#include "kernels/sgd.cuh"

namespace cutrain {

void sgd_update_cpu(float* param, float* momentum, const SgdSegment* segments, int count, const float* lr,
                    SgdConfig cfg) {
  const float rate = *lr;
  for (int s = 0; s < count; ++s)
    for (int64_t i = 0; i < segments[s].numel; ++i) sgd_update_element(param, momentum, segments[s], i, rate, cfg);
}

}  // namespace cutrain
