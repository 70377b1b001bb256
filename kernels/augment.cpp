// augment.cpp: the CPU twin of the gather + augment kernel, and the parameter set-up.
#include "kernels/augment.h"

#include <stdexcept>
#include <string>

namespace cutrain {

size_t pixel_type_size(PixelType type) { return type == PixelType::f32 ? 4 : 2; }

AugmentParams make_augment_params(const AugmentConfig& config, int height, int width, int out_channels) {
  if (height <= 0 || width <= 0) throw std::invalid_argument("augment: image size must be positive");
  if (out_channels < 3)
    throw std::invalid_argument("augment: out_channels is " + std::to_string(out_channels) + ", must be >= 3");
  if (config.pad < 0) throw std::invalid_argument("augment: pad is " + std::to_string(config.pad) + ", must be >= 0");
  AugmentParams p;
  p.height = height;
  p.width = width;
  p.out_channels = out_channels;
  p.train = config.train;
  p.pad = config.pad;
  p.flip = config.flip;
  p.seed = config.seed;
  for (int c = 0; c < 3; ++c) {
    if (!(config.std[c] > 0.0f))
      throw std::invalid_argument("augment: std[" + std::to_string(c) + "] must be positive");
    p.mean255[c] = 255.0f * config.mean[c];
    p.inv_std255[c] = 1.0f / (255.0f * config.std[c]);
  }
  return p;
}

// One image: out[y][x][c] = augment_pixel(...) for every output pixel. The crop and flip are
// drawn once per image; the loops are plain so the compiler can hoist and unswitch them.
template <typename T>
static void augment_image(const uint8_t* image, const AugmentParams& p, CropFlip cf, T* out) {
  const int channels = p.out_channels;
  for (int y = 0; y < p.height; ++y)
    for (int x = 0; x < p.width; ++x, out += channels)
      for (int c = 0; c < channels; ++c) store_pixel(augment_pixel(image, p, cf, y, x, c), out + c);
}

template <typename T>
static void gather_augment(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count,
                           int64_t epoch, const AugmentParams& p, T* out_images, int32_t* out_labels) {
  const size_t in_bytes = size_t(p.height) * p.width * 3;
  const size_t out_elements = size_t(p.height) * p.width * p.out_channels;
  for (int i = 0; i < count; ++i) {
    int64_t sample = indices[i];
    augment_image(images + size_t(sample) * in_bytes, p, crop_flip(p, epoch, sample), out_images + i * out_elements);
    out_labels[i] = labels[sample];
  }
}

void gather_augment_cpu(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count,
                        int64_t epoch, const AugmentParams& p, PixelType type, void* out_images,
                        int32_t* out_labels) {
  if (type == PixelType::f32)
    gather_augment(images, labels, indices, count, epoch, p, static_cast<float*>(out_images), out_labels);
  else
    gather_augment(images, labels, indices, count, epoch, p, static_cast<__nv_bfloat16*>(out_images), out_labels);
}

}  // namespace cutrain
