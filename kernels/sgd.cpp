// sgd.cpp: the CPU reference of sgd.h, the shared update of sgd.cuh over the flat buffer.
#include "kernels/sgd.h"

#include "kernels/sgd.cuh"

namespace cutrain {

void sgd_step_cpu(float* param, const float* grad, float* momentum_buf, int64_t n, const float* lr, SgdConfig cfg) {
  const float rate = *lr;
  for (int64_t i = 0; i < n; ++i) sgd_update(param[i], grad[i], momentum_buf[i], rate, cfg);
}

}  // namespace cutrain
