// ema.h: the exponential moving average of the weights, torchvision's ExponentialMovingAverage (an
// AveragedModel with use_buffers=True, in its reference script's utils.py), over flat fp32 arrays: the
// parameters' and batch norm's running statistics'. One launch updates both:
//
//   average = copy ? value : decay * average + rest * value
//
// `copy` is AveragedModel's first update (n_averaged == 0), which copies. `rest` is (1 - decay) as the
// caller computes it in double, PyTorch's `1 - decay` of the Python float, and both factors are then
// rounded to fp32, as PyTorch multiplies an fp32 tensor by a Python number. Each product and the sum is
// rounded to fp32 on its own, as PyTorch's three tensor operations are (decay * avg, (1 - decay) * param,
// their sum), so that the average is PyTorch's bit for bit.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

// `numel` averages and the values they follow.
struct EmaArrays {
  float* average = nullptr;
  const float* value = nullptr;
  int64_t numel = 0;
};

void ema_update_cpu(EmaArrays parameters, EmaArrays buffers, float decay, float rest, bool copy);
void ema_update_cuda(EmaArrays parameters, EmaArrays buffers, float decay, float rest, bool copy, cudaStream_t stream);

}  // namespace cutrain
