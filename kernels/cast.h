// cast.h: fp32 -> bf16 conversion of a flat array (round to nearest even): the classifier's
// gradient, which its two bf16 products read in bf16 mode (Linear, nn/pooling_linear_loss.h).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace cutrain {

void cast_f32_to_bf16_cuda(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);

}  // namespace cutrain
