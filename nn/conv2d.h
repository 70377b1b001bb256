// conv2d.h: 2-D convolution without bias (every convolution of ResNet is followed by batch
// norm), with NHWC activations and OHWI filters. The math is kernels/conv2d_cpu.h's:
//
//   y[n,p,q,o] = sum_{r,s,i} x[n, p*stride - pad + r, q*stride - pad + s, i] * w[o,r,s,i]
//   dx = conv_transpose(dy, w)  (written with beta: 0 overwrites, 1 adds a residual branch's share)
//   dw = correlation of x with dy (written =, into the flat gradient buffer)
//
// The CPU computes it with oneDNN (kernels/conv2d_cpu.h). The GPU runs each pass (forward, backward-data,
// backward-filter) as a one-operation graph of cuDNN's backend API on NHWC tensors
// (nn/conv_graph.h). Its execution plan is chosen and finalized in the constructor, once per shape
// and pass, by cuDNN's heuristics or by timing the candidates with --cudnn-benchmark
// (nn/conv_engines.h), and the largest workspace is planned. bind() finalizes the variant packs
// once the memory is allocated, so a pass in the step is one cudnnBackendExecute: it allocates
// nothing and can be captured. A plan that fails in the first, eager step is replaced with one line
// (Note [Engine fallback]).
//
// Forward runs on the stream its caller passes. Backward computes dW on the side stream while dX
// runs on the main one, and joins the two before it returns (Note [Side stream]).
//
// The convolution of the fused unit bn-relu-conv (nn/bn_relu_conv.h) can also run its forward
// with the prologue of nn/conv_graph.h: it then reads the batch norm's input and its scale and
// shift instead of x, which that forward leaves unwritten. Its unit runs the two halves of
// backward apart, since the batch norm's backward, which writes x, comes between them.
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
  // With adds_input_grad backward adds its dx to x.grad (beta = 1: another layer reads x too and
  // writes its share first), else it writes it. An x without a gradient (the image) gets none.
  Conv2d(ModelResources& resources, const std::string& name, Activation& x, int in_channels, int out_channels,
         int kernel, int stride, int pad, bool adds_input_grad);
  ~Conv2d();

  // Finalizes the variant packs of the GPU's passes; once, after the model's memory is allocated
  // and before the first forward. Nothing on the CPU.
  void bind();
  // Enqueues y on `stream`, one of the context's two (ignored on the CPU).
  void forward(cudaStream_t stream);
  // Writes dW, and writes or adds dx (see the constructor).
  void backward();

  // GPU only, before the model's memory is allocated: plans the forward whose prologue computes
  // x = relu(raw*scale + shift) as it reads (ConvPass::forward_scale_shift_relu), for
  // forward_with_prologue. Returns false, with cuDNN's reason in `why`, when cuDNN has no plan.
  bool plan_prologue(Activation& raw, const Tensor& scale, const Tensor& shift, std::string& why);
  // After bind(): runs the planned forward with the prologue once on the main stream and waits,
  // replacing a plan that fails as Note [Engine fallback] does. Returns false, with cuDNN's reason
  // in `why`, when no plan runs; the layer then forgets the prologue.
  bool try_prologue(std::string& why);
  // y from raw, scale and shift, on `stream`.
  void forward_with_prologue(cudaStream_t stream);
  // backward()'s two halves, apart and both on the main stream: dx, then dW.
  void backward_data();
  void backward_filter();

  Parameter& weight;  // torchvision [K, C_in, R, S], stored OHWI
  Activation& y;      // [N,P,Q,K]

 private:
  struct Pass;  // one pass's plan and variant packs
  const void* filter_data() const;
  void run(Pass& pass, cudaStream_t stream);
  // Runs `pass` on `stream`; returns cuDNN's status where run() would throw.
  cudnnStatus_t try_run(Pass& pass, cudaStream_t stream);

  struct Gpu;  // the passes, the padded filter and the gradient copy
  ModelResources& resources_;
  Activation& x_;
  ConvShape shape_;  // with the padded channel count C of x
  float dx_beta_;    // the CPU's; the GPU's is in its backward-data graph
  std::unique_ptr<Gpu> gpu_;
};

}  // namespace cutrain
