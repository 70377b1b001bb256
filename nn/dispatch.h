// dispatch.h: the GPU kernels are templates over the activation type; dispatch_activation calls
// f with a value of that type (float, or __nv_bfloat16 in bf16 mode), so a layer writes its
// CUDA path once:   dispatch_activation(dtype, [&](auto zero) { using T = decltype(zero); ... });
#pragma once

#include <cuda_bf16.h>

#include "nn/tensor.h"

namespace cutrain {

template <typename F>
void dispatch_activation(DType dtype, F&& f) {
  if (dtype == DType::bf16) {
    f(__nv_bfloat16{});
  } else {
    f(float{});
  }
}

}  // namespace cutrain
