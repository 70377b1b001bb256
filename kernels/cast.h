// cast.h: fp32 <-> bf16 conversion of a flat array (round to nearest even), for the bf16 weight
// copy at start-up and after loading, and for reading bf16 activations back in tests.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace cutrain {

void cast_f32_to_bf16_cuda(const float* in, __nv_bfloat16* out, int64_t n, cudaStream_t stream);
void cast_bf16_to_f32_cuda(const __nv_bfloat16* in, float* out, int64_t n, cudaStream_t stream);

}  // namespace cutrain
