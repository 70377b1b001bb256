// conv2d_cpu.h: the CPU convolution (cuDNN is the GPU one), NHWC activations and
// OHWI ("KRSC") filters, the layout cuDNN uses for NHWC.
//
//   y[n,p,q,o] = sum_{r,s,i} x[n, p*stride - pad + r, q*stride - pad + s, i] * w[o,r,s,i]
//
// As matrices (im2col): each output pixel's receptive field is a row of cols[N*P*Q, R*S*I] (zeros
// where the window leaves the image), so y = cols * w^T, dw = dy^T * cols, and dx is dcols = dy * w
// scattered back (col2im) onto the pixels the windows read. oneDNN's convolution primitives compute
// these without forming cols; the float64 step of tests/resnet18_fp64.cpp, which spells the sums
// out, is the oracle they are tested against.
// Gradient conventions follow cuDNN's alpha/beta: dx and dw are scaled by beta before adding
// (beta = 0 overwrites, beta = 1 accumulates, as a residual branch's input gradient needs).
#pragma once

namespace cutrain {

struct ConvShape {
  int N, H, W, C;  // input
  int K, R, S;     // output channels, filter height and width
  int stride, pad;
  int P() const { return (H + 2 * pad - R) / stride + 1; }
  int Q() const { return (W + 2 * pad - S) / stride + 1; }
};

void conv2d_forward_cpu(const float* x, const float* w, const ConvShape& shape, float* y);
void conv2d_backward_data_cpu(const float* dy, const float* w, const ConvShape& shape, float beta, float* dx);
void conv2d_backward_filter_cpu(const float* x, const float* dy, const ConvShape& shape, float beta, float* dw);

}  // namespace cutrain
