// linear_cpu.h: the CPU reference of the classifier (cuBLAS is the GPU one), PyTorch's layout:
//
//   y[N,O] = x[N,I] * W^T + b,   W[O,I]
//   dx = dy * W,   dW (+)= dy^T * x,   db (+)= sum_n dy[n]
//
// dW and db are scaled by beta before adding, like conv2d_cpu.h. Eigen does the products.
#pragma once

namespace cutrain {

void linear_forward_cpu(const float* x, const float* w, const float* b, int N, int I, int O, float* y);
void linear_backward_cpu(const float* x, const float* w, const float* dy, int N, int I, int O, float beta, float* dx,
                         float* dw, float* db);

}  // namespace cutrain
