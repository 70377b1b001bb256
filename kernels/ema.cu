// ema.cu: the CUDA side of ema.h, one grid-stride pass over the parameters and then the buffers.
#include "kernels/ema.h"

#include "kernels/ema.cuh"
#include "kernels/launch.cuh"

namespace cutrain {

namespace {

// Element i of the parameters, or of the buffers after them: average = copy ? value : the average of ema.cuh.
__global__ void ema_update_kernel(EmaArrays parameters, EmaArrays buffers, float decay, float rest, bool copy) {
  CUTRAIN_GRID_STRIDE_LOOP(i, parameters.numel + buffers.numel) {
    const bool parameter = i < parameters.numel;
    const EmaArrays& a = parameter ? parameters : buffers;
    const int64_t j = parameter ? i : i - parameters.numel;
    a.average[j] = copy ? a.value[j] : ema_average(a.average[j], a.value[j], decay, rest);
  }
}

}  // namespace

void ema_update_cuda(EmaArrays parameters, EmaArrays buffers, float decay, float rest, bool copy, cudaStream_t stream) {
  const int64_t n = parameters.numel + buffers.numel;
  launch_kernel({"ema_update_kernel", {bytes_of<float>(copy ? n : 2 * n), bytes_of<float>(n)}}, ema_update_kernel,
                grid_for(n), kBlockThreads, 0, stream, parameters, buffers, decay, rest, copy);
}

}  // namespace cutrain
