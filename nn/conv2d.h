// conv2d.h: 2-D convolution without bias (ResNet's convs are all followed by batch norm),
// NHWC activations and OHWI filters. The math (see kernels/conv2d_cpu.h):
//
//   y[n,p,q,o] = sum_{r,s,i} x[n, p*stride - pad + r, q*stride - pad + s, i] * w[o,r,s,i]
//   dx = conv_transpose(dy, w)  (written with beta: 0 overwrites, 1 adds a residual branch's share)
//   dw = correlation of x with dy (written =, into the flat gradient buffer)
//
// CPU: im2col + Eigen (kernels/conv2d_cpu.h). GPU: cuDNN's legacy API with NHWC tensors; the
// algorithm for each of forward, backward-data and backward-filter is chosen once per shape
// (nn/conv_algorithms.h: cuDNN's heuristics, or measured with --cudnn-benchmark), and the
// largest workspace is planned.
//
// The GPU stem: cuDNN's tensor cores want input channels in multiples of 8, so the model's input
// has 8 channels on the GPU (3 image channels, 5 zeros). The parameter keeps torchvision's
// 3 channels; the layer keeps a padded filter [K,R,S,8] whose extra channels stay zero, refreshed
// from the parameter before each forward, and copies back only the 3 real channels of dw.
// In bf16 the filter cuDNN sees is bf16 (the parameter's bf16 copy), and its gradient comes back
// in bf16 and is widened into the fp32 gradient buffer.
#pragma once

#include <memory>
#include <string>

#include "kernels/conv2d_cpu.h"
#include "nn/net.h"

namespace cutrain {

class Conv2d {
 public:
  // x: [N,H,W,C_in]; C_in may exceed in_channels (zero padding channels, see above).
  Conv2d(Net& net, const std::string& name, Activation& x, int in_channels, int out_channels, int kernel,
         int stride, int pad);
  ~Conv2d();

  void forward();
  // dx_beta: 0 writes x.grad, 1 adds to it; x without a gradient (the image) skips it.
  void backward(float dx_beta);

  Parameter& weight;  // torchvision [K, C_in, R, S], stored OHWI
  Activation& y;      // [N,P,Q,K]

 private:
  const void* filter_data() const;

  struct Gpu;  // cuDNN descriptors, algorithms, padded filter (conv2d.cpp)
  Net& net_;
  Activation& x_;
  ConvShape shape_;   // with the padded channel count C of x
  int in_channels_;   // channels of the parameter (C unless padded)
  std::unique_ptr<Gpu> gpu_;
};

}  // namespace cutrain
