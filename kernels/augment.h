// augment.h: gather a batch of dataset images by sample index and augment it, into NHWC fp32 or
// bf16. The CPU twin (augment.cpp) is the reference; the CUDA version (augment.cu) runs the same
// per-pixel math (augment.cuh) on a dataset kept on the GPU.
//
//   AugmentParams p = make_augment_params(AugmentConfig{}, 32, 32, /*out_channels=*/3);
//   gather_augment_cpu(images, labels, indices, n, epoch, p, PixelType::f32, out, out_labels);
//
// Both read images[indices[i]] (N x H x W x 3 uint8) and labels[indices[i]], and write
// out[i] (H x W x out_channels) and out_labels[i], for i < count. Indices must lie in [0, N):
// the callers (data/loader.h, data/gpu_loader.h) check them once per epoch.
#pragma once

#include <array>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/augment.cuh"

namespace cutrain {

enum class PixelType { f32, bf16 };

size_t pixel_type_size(PixelType type);

// The user-facing knobs; make_augment_params turns them into the kernel's precomputed form.
struct AugmentConfig {
  bool train = true;    // false: normalise only (evaluation)
  bool mirror = false;  // with train = false: mirror every image (test-time augmentation's second view)
  uint64_t seed = 0;
  int pad = 4;
  bool flip = true;
  std::array<float, 3> mean = {0.4914f, 0.4822f, 0.4465f};
  std::array<float, 3> std = {0.2023f, 0.1994f, 0.2010f};
};

// Throws std::invalid_argument for out_channels < 3, pad < 0 or std <= 0.
AugmentParams make_augment_params(const AugmentConfig& config, int height, int width, int out_channels);

void gather_augment_cpu(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count, int64_t epoch,
                        const AugmentParams& p, PixelType type, void* out_images, int32_t* out_labels);

// Device pointers throughout; one kernel on `stream`, no allocation, no synchronisation, so it
// can be captured in a CUDA graph.
void gather_augment_cuda(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count, int64_t epoch,
                         const AugmentParams& p, PixelType type, void* out_images, int32_t* out_labels,
                         cudaStream_t stream);

}  // namespace cutrain
