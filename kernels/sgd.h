// sgd.h: PyTorch's SGD (dampening 0), one launch for the parameters of a bucket:
//
//   g   = scale * grad + decay * param             (decay: weight_decay, or norm_weight_decay for a
//                                                   segment of a normalization layer when it is set;
//                                                   scale: 1, or the clip factor below)
//   buf = momentum * buf + g                       (buf starts at zero, which equals PyTorch's
//                                                   "buf = g" on the first step)
//   d   = nesterov ? g + momentum * buf : buf
//   param -= lr * d
//
// The parameters and their momentum live in flat fp32 buffers. A segment is one parameter's span
// of them, with where its gradient is -- fp32, or the bf16 that cuDNN wrote (nn/sgd.h says which
// and why) -- and, if forward reads a copy of the weights, where to write it: the bf16 copy in
// bf16 mode, the stem's zero-padded filter. Each of the two holds the parameter contiguously or
// as rows of `cols` elements `pitch` apart (the stem's filter: 3 of 8 input channels).
//
// The learning rate is read from memory (*lr, written by kernels/lr_schedule.h's step), so a
// captured CUDA graph replays with each step's rate. By default every parameter is decayed alike,
// batch norm's included, as PyTorch's recipe does. norm_weight_decay is torchvision's reference
// script's --norm-weight-decay: the decay of the parameters of normalization layers alone
// (torchvision's set_weight_decay puts them in their own parameter group), unset (negative) for
// weight_decay's, as torchvision's None.
//
// With gradient clipping (torchvision's --clip-grad-norm, torch.nn.utils.clip_grad_norm_ between
// backward and the step), the update reads the gradient scaled by a factor that it finds in memory,
// *grad_scale, written on the device by the launch of the sum of squares below, so that no step
// waits for the host to learn the norm.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace cutrain {

struct SgdConfig {
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
  bool nesterov = true;
  float norm_weight_decay = -1;  // negative: weight_decay
};

// A parameter's numel elements in float or __nv_bfloat16 (bf16), contiguous (cols 0) or as rows of
// `cols` elements `pitch` apart.
struct SgdArray {
  void* data = nullptr;
  bool bf16 = false;
  int64_t cols = 0, pitch = 0;
};

struct SgdSegment {
  int64_t offset = 0;  // into param and momentum, in elements
  int64_t numel = 0;
  SgdArray grad;      // read
  SgdArray copy;      // written, unless data is null
  bool norm = false;  // a normalization layer's parameter: decayed by norm_weight_decay when it is set
  // Both contiguous, every pointer 16-byte aligned at element 0: updated four elements at a time.
  bool packed = false;
};

// segments: `count` of them on the host. The CUDA launcher reads the same segments from device
// memory (device_segments) and uses the host ones for its grid and the inventory's bytes. A null
// grad_scale is a scale of 1; so is a factor of exactly 1, with which the update is the unscaled
// one bit for bit.
void sgd_update_cpu(float* param, float* momentum, const SgdSegment* segments, int count, const float* lr,
                    SgdConfig cfg, const float* grad_scale = nullptr);
void sgd_update_cuda(float* param, float* momentum, const SgdSegment* segments, const SgdSegment* device_segments,
                     int count, const float* lr, SgdConfig cfg, cudaStream_t stream, const float* grad_scale = nullptr);

// torch.nn.utils.clip_grad_norm_ for the update: the factor that scales the gradient, computed from
// the gradient's total norm (below) and written to *factor, device memory for the CUDA launcher.
struct SgdClip {
  double max_norm = 0;
  float* factor = nullptr;
};

// The sum of the squares of the segments' gradients, as the update reads them, in double:
//
//   squares = sum over segments s, elements i of grad_s[i]^2
//
// Its square root is the gradient's 2-norm, torch.nn.utils.clip_grad_norm_'s total norm. The CUDA
// launcher writes it to *squares with one block, so that the order of the additions, and the
// result, never vary. With `clip`, both also write clip_grad_norm_'s factor for that norm to
// *clip->factor (sgd_clip_factor in sgd.cuh):
//
//   factor = min(max_norm / (sqrt(squares) + 1e-6), 1)
//
// in double, then rounded to float; NaN when the norm is NaN, as torch's clamp gives, so that
// clipping hides no NaN gradient. Without clipping the step line asks for the squares between
// steps; with it, every step waits for them before its first update, one block's read of the 45 MB
// of gradients (a few milliseconds by estimate; only a GPU can time it).
double sgd_grad_squares_cpu(const SgdSegment* segments, int count, const SgdClip* clip = nullptr);
void sgd_grad_squares_cuda(const SgdSegment* segments, const SgdSegment* device_segments, int count, double* squares,
                           cudaStream_t stream, const SgdClip* clip = nullptr);

}  // namespace cutrain
