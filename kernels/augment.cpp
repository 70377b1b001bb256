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
  p.mirror = config.mirror;
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

// The CPU's shortcut: a source value is a byte, so normalize() has only 3 x 256 possible results.
// They are computed once per batch with the shared function, already in the output type, and
// looked up; the results are bit for bit those of augment_pixel.
template <typename T>
struct NormalizeTable {
  T value[3][256];
  T zero;
  explicit NormalizeTable(const AugmentParams& p) {
    for (int c = 0; c < 3; ++c)
      for (int v = 0; v < 256; ++v) store_pixel(normalize(p, v, c), &value[c][v]);
    store_pixel(0.0f, &zero);
  }
};

// One image: out[y][x][c] = augment_pixel(image, p, cf, y, x, c), through the table. Padding
// pixels read three zero bytes, exactly as the formula does.
template <typename T>
static void augment_image(const uint8_t* image, const AugmentParams& p, CropFlip cf, const NormalizeTable<T>& table,
                          T* out) {
  static const uint8_t padding[3] = {0, 0, 0};
  const int channels = p.out_channels;
  for (int y = 0; y < p.height; ++y)
    for (int x = 0; x < p.width; ++x, out += channels) {
      const int source = source_pixel(p, cf, y, x);
      const uint8_t* v = source < 0 ? padding : image + source * 3;
      out[0] = table.value[0][v[0]];
      out[1] = table.value[1][v[1]];
      out[2] = table.value[2][v[2]];
      for (int c = 3; c < channels; ++c) out[c] = table.zero;
    }
}

template <typename T>
static void gather_augment(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count,
                           int64_t epoch, const AugmentParams& p, T* out_images, int32_t* out_labels) {
  const NormalizeTable<T> table(p);
  const size_t in_bytes = size_t(p.height) * p.width * 3;
  const size_t out_elements = size_t(p.height) * p.width * p.out_channels;
  for (int i = 0; i < count; ++i) {
    const int64_t sample = indices[i];
    augment_image(images + size_t(sample) * in_bytes, p, crop_flip(p, epoch, sample), table,
                  out_images + i * out_elements);
    out_labels[i] = labels[sample];
  }
}

void gather_augment_cpu(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count, int64_t epoch,
                        const AugmentParams& p, PixelType type, void* out_images, int32_t* out_labels) {
  if (type == PixelType::f32)
    gather_augment(images, labels, indices, count, epoch, p, static_cast<float*>(out_images), out_labels);
  else
    gather_augment(images, labels, indices, count, epoch, p, static_cast<__nv_bfloat16*>(out_images), out_labels);
}

}  // namespace cutrain
