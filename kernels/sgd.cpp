// sgd.cpp: the CPU reference of sgd.h, the shared update of sgd.cuh element by element, in
// blocks of elements on the threads of cpu_threads.h (each element's update is its own), and the
// gradient's sum of squares.
#include "kernels/sgd.h"

#include <algorithm>
#include <vector>

#include "kernels/base/cpu_threads.h"
#include "kernels/sgd.cuh"

namespace cutrain {

constexpr int64_t kBlock = 16384;  // elements per task on the CPU threads

void sgd_update_cpu(float* param, float* momentum, const SgdSegment* segments, int count, const float* lr,
                    SgdConfig cfg, const float* grad_scale) {
  const float rate = *lr, scale = grad_scale ? *grad_scale : 1.0f;
  for (int s = 0; s < count; ++s) {
    const SgdSegment& segment = segments[s];
    parallel_for((segment.numel + kBlock - 1) / kBlock, [&](int64_t block) {
      const int64_t end = std::min(segment.numel, (block + 1) * kBlock);
      for (int64_t i = block * kBlock; i < end; ++i) sgd_update_element(param, momentum, segment, i, rate, scale, cfg);
    });
  }
}

// Each block of elements sums its squares on its own; the blocks' sums are then added in order.
double sgd_grad_squares_cpu(const SgdSegment* segments, int count, const SgdClip* clip) {
  double squares = 0;
  for (int s = 0; s < count; ++s) {
    const SgdSegment& segment = segments[s];
    std::vector<double> partial(size_t((segment.numel + kBlock - 1) / kBlock));
    parallel_for(int64_t(partial.size()), [&](int64_t block) {
      const int64_t end = std::min(segment.numel, (block + 1) * kBlock);
      double& sum = partial[size_t(block)];
      for (int64_t i = block * kBlock; i < end; ++i) {
        const double g = sgd_load(segment.grad, i);
        sum += g * g;
      }
    });
    for (double p : partial) squares += p;
  }
  if (clip) *clip->factor = sgd_clip_factor(squares, clip->max_norm);
  return squares;
}

}  // namespace cutrain
