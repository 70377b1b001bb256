// augment.cuh: the per-pixel math of the training augmentation, shared by the CPU loader
// (kernels/augment.cpp) and the CUDA gather kernel (kernels/augment.cu), so the two cannot drift.
//
// The recipe is torchvision's CIFAR one, applied to a uint8 H x W x 3 image:
//   RandomCrop(size, padding=pad)  zero-pad `pad` pixels on every side, cut a size x size window
//                                  whose top-left corner (top, left) is uniform in [0, 2 pad]^2;
//   RandomHorizontalFlip(p=0.5)    mirror that window left-right;
//   ToTensor + Normalize           v / 255, then (v - mean_c) / std_c.
// Evaluation skips the first two (top = left = pad, no flip), or mirrors every image (the second
// view of test-time augmentation, `mirror`). Written as one formula per output
// pixel (y, x) and channel c, with dy = top - pad, dx = left - pad:
//   x' = flip ? W - 1 - x : x
//   v  = image[y + dy][x' + dx][c], or 0 where that falls in the padding
//   out[y][x][c] = (v - 255 mean_c) * (1 / (255 std_c))          for c < 3
//   out[y][x][c] = 0                                              for 3 <= c < out_channels
// The normalisation is a subtraction followed by a product: no compiler may fuse that into an
// FMA, so the CPU and the GPU round it identically and their fp32 outputs agree bit for bit.
// The extra zero channels let the GPU model pad its input to 4 or 8 channels for tensor cores.
#pragma once

#include <cstdint>
#include <cstring>

#include <cuda_bf16.h>

#include "kernels/rng.cuh"

namespace cutrain {

// What to do to every image of a dataset; fixed for a run (the epoch is passed per call).
struct AugmentParams {
  int height = 32, width = 32;  // of the stored images and of the output (the crop is image-sized)
  int out_channels = 3;         // >= 3; channels 3 .. out_channels-1 are written as zeros
  bool train = true;            // false: normalise only
  bool mirror = false;          // with train = false: mirror every image left-right
  int pad = 4;                  // zero padding around the image before the random crop
  bool flip = true;             // random horizontal flip with p = 0.5
  uint64_t seed = 0;
  float mean255[3] = {};     // 255 * mean_c
  float inv_std255[3] = {};  // 1 / (255 * std_c)
};

// Where one sample's window sits: source pixel = output pixel shifted by (dy, dx), after mirroring.
struct CropFlip {
  int dy = 0, dx = 0;
  bool flip = false;
};

// The crop and flip of `sample` in `epoch`, from the counter-based generator: bits 0..31 pick the
// top, bits 32..62 the left, bit 63 the flip. Depends on nothing else, hence on no thread or rank.
CUTRAIN_HOST_DEVICE inline CropFlip crop_flip(const AugmentParams& p, int64_t epoch, int64_t sample) {
  if (!p.train) {
    CropFlip mirrored;
    mirrored.flip = p.mirror;
    return mirrored;
  }
  uint64_t bits = random_bits(p.seed, uint64_t(epoch), uint64_t(sample));
  uint32_t choices = uint32_t(2 * p.pad + 1);
  CropFlip cf;
  cf.dy = int(uint32_t(bits) % choices) - p.pad;
  cf.dx = int(uint32_t(bits >> 32 & 0x7fffffffu) % choices) - p.pad;
  cf.flip = p.flip && (bits >> 63) != 0;
  return cf;
}

// Where output pixel (y, x) comes from: the index y' * W + x' of the source pixel, or -1 when it
// falls in the zero padding.
CUTRAIN_HOST_DEVICE inline int source_pixel(const AugmentParams& p, CropFlip cf, int y, int x) {
  const int sy = y + cf.dy;
  const int sx = (cf.flip ? p.width - 1 - x : x) + cf.dx;
  const bool inside = sy >= 0 && sy < p.height && sx >= 0 && sx < p.width;
  return inside ? sy * p.width + sx : -1;
}

// The normalisation of byte v of channel c < 3.
CUTRAIN_HOST_DEVICE inline float normalize(const AugmentParams& p, int v, int c) {
  return (float(v) - p.mean255[c]) * p.inv_std255[c];
}

// One output value out[y][x][c] of the formula above; `image` is the uint8 H x W x 3 source.
CUTRAIN_HOST_DEVICE inline float augment_pixel(const uint8_t* image, const AugmentParams& p, CropFlip cf, int y, int x,
                                               int c) {
  if (c >= 3) return 0.0f;
  const int source = source_pixel(p, cf, y, x);
  return normalize(p, source < 0 ? 0 : image[source * 3 + c], c);
}

// Writing an output value as fp32, or as bf16 rounded to nearest even. On the host the rounding
// is spelled out (cuda_bf16's host version is several times slower): add 0x7fff plus the lowest
// kept bit, keep the top 16 bits. Exact for the finite values augment_pixel produces.
CUTRAIN_HOST_DEVICE inline void store_pixel(float v, float* out) { *out = v; }
CUTRAIN_HOST_DEVICE inline void store_pixel(float v, __nv_bfloat16* out) {
#ifdef __CUDA_ARCH__
  *out = __float2bfloat16_rn(v);
#else
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  __nv_bfloat16_raw rounded;
  rounded.x = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
  *out = rounded;
#endif
}

}  // namespace cutrain
