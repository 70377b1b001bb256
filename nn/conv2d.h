// conv2d.h: 2-D convolution without bias (every convolution of ResNet is followed by batch
// norm), with NHWC activations and OHWI filters. The math is kernels/conv2d_cpu.h's:
//
//   y[n,p,q,o] = sum_{r,s,i} x[n, p*stride - pad + r, q*stride - pad + s, i] * w[o,r,s,i]
//   dx = conv_transpose(dy, w)  (written with beta: 0 overwrites, 1 adds a residual branch's share)
//   dw = correlation of x with dy (written =, into the flat gradient buffer)
//
// The CPU computes it with im2col and Eigen. The GPU calls cuDNN's legacy API with NHWC tensors.
// The algorithm for each of forward, backward-data and backward-filter is chosen once per shape,
// by cuDNN's heuristics or by measuring them with --cudnn-benchmark, and the largest workspace is
// planned.
//
// Forward runs on the stream its caller passes. Backward computes dW on the side stream while dX
// runs on the main one, and joins the two before it returns (Note [Side stream]).
//
// What cuDNN reads and writes is where SGD reads and writes it, so no kernel copies filters or
// their gradients in a step. In bf16, cuDNN reads the parameter's bf16 copy and writes dW in
// bf16. The GPU stem is padded, because cuDNN's tensor cores want input channels in multiples of
// 8. The model's input therefore has 8 channels on the GPU (3 image channels and 5 zeros). The
// parameter keeps torchvision's 3 channels. cuDNN reads a padded filter [K,R,S,8] and writes a
// padded gradient, and SGD reads and writes the 3 real channels of every row, so the other 5 stay
// zero.
#pragma once

#include <memory>
#include <string>

#include "kernels/conv2d_cpu.h"
#include "nn/model_resources.h"

namespace cutrain {

class Conv2d {
 public:
  // x is [N,H,W,C_in], where C_in may exceed in_channels by channels of zeros (the padded stem).
  Conv2d(ModelResources& resources, const std::string& name, Activation& x, int in_channels, int out_channels,
         int kernel, int stride, int pad);
  ~Conv2d();

  // Enqueues y on `stream`, one of the context's two (ignored on the CPU).
  void forward(cudaStream_t stream);
  // With dx_beta 0 backward writes x.grad, and with 1 it adds to it. An x without a gradient (the
  // image) gets none.
  void backward(float dx_beta);

  Parameter& weight;  // torchvision [K, C_in, R, S], stored OHWI
  Activation& y;      // [N,P,Q,K]

 private:
  const void* filter_data() const;
  void backward_filter(cudaStream_t stream);  // dW
  void backward_data(float dx_beta, cudaStream_t stream);

  struct Gpu;  // cuDNN descriptors, algorithms, the padded filter and the gradient copy
  ModelResources& resources_;
  Activation& x_;
  ConvShape shape_;  // with the padded channel count C of x
  int in_channels_;  // channels of the parameter (C unless padded)
  std::unique_ptr<Gpu> gpu_;
};

}  // namespace cutrain
