// linear.h: the classifier, PyTorch's nn.Linear:  y[N,O] = x[N,I] W^T + b,  W [O,I].
//   dx = dy W (=),   dW = dy^T x (=),   db = sum_n dy[n] (=)
//
// CPU: kernels/linear_cpu.h. GPU: cuBLAS, fp32 accumulation. The output (the logits) and its
// gradient are fp32 in both precisions; in bf16 mode x and the weight copy are bf16 (GemmEx
// bf16 x bf16 -> fp32), dy is rounded to bf16 for the two backward products, dW lands in fp32.
// The bias is added as a rank-1 product ones[N] b^T before the main product accumulates.
#pragma once

#include <string>

#include "nn/model_resources.h"

namespace cutrain {

class Linear {
 public:
  Linear(ModelResources& resources, const std::string& name, Activation& x, int out_features);

  void forward();
  void backward();

  Parameter& weight;  // [O, I]
  Parameter& bias;    // [O]
  Activation& y;      // [N, O], fp32

 private:
  void backward_gpu();

  ModelResources& resources_;
  Activation& x_;
  int n_, in_, out_;
  Tensor* ones_ = nullptr;     // GPU: [N] fp32 ones (the bias broadcast and db as products)
  Tensor* dy_bf16_ = nullptr;  // GPU bf16 mode: [N, O] dy rounded to bf16
};

}  // namespace cutrain
