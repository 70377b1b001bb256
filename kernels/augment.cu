// augment.cu: gather a batch from the uint8 dataset on the GPU and augment it.
//
// One thread per output pixel (i, y, x) of the batch: it finds sample indices[i], draws that
// sample's crop and flip (cheap: three hashes), and writes the pixel's out_channels values with
// the shared per-pixel math of augment.cuh. The thread of each image's pixel (0, 0) also copies
// the label. Neighbouring threads read neighbouring pixels of one source image and write
// neighbouring output pixels, so both sides coalesce.
#include "kernels/augment.h"
#include "kernels/launch.cuh"

namespace cutrain {

template <typename T>
__global__ void gather_augment_kernel(const uint8_t* __restrict__ images, const int32_t* __restrict__ labels,
                                      const int64_t* __restrict__ indices, int count, int64_t epoch, AugmentParams p,
                                      T* __restrict__ out_images, int32_t* __restrict__ out_labels) {
  const int pixels = p.height * p.width;
  const int64_t pixel = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pixel >= int64_t(count) * pixels) return;
  const int i = int(pixel / pixels);
  const int yx = int(pixel % pixels);
  const int y = yx / p.width, x = yx % p.width;
  const int64_t sample = indices[i];
  const CropFlip cf = crop_flip(p, epoch, sample);
  const uint8_t* image = images + sample * int64_t(pixels) * 3;
  T* out = out_images + pixel * p.out_channels;
  for (int c = 0; c < p.out_channels; ++c) store_pixel(augment_pixel(image, p, cf, y, x, c), out + c);
  if (yx == 0) out_labels[i] = labels[sample];
}

template <typename T>
static void launch(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count, int64_t epoch,
                   const AugmentParams& p, T* out_images, int32_t* out_labels, cudaStream_t stream) {
  if (count <= 0) return;
  const int64_t threads = int64_t(count) * p.height * p.width;
  const unsigned grid = unsigned((threads + kBlockThreads - 1) / kBlockThreads);
  const Traffic bytes{threads * 3 + count * int64_t(sizeof(int64_t) + sizeof(int32_t)),
                      threads * p.out_channels * int64_t(sizeof(T)) + count * int64_t(sizeof(int32_t))};
  launch_kernel({"gather_augment_kernel", bytes}, gather_augment_kernel<T>, grid, kBlockThreads, 0, stream, images,
                labels, indices, count, epoch, p, out_images, out_labels);
}

void gather_augment_cuda(const uint8_t* images, const int32_t* labels, const int64_t* indices, int count, int64_t epoch,
                         const AugmentParams& p, PixelType type, void* out_images, int32_t* out_labels,
                         cudaStream_t stream) {
  if (type == PixelType::f32)
    launch(images, labels, indices, count, epoch, p, static_cast<float*>(out_images), out_labels, stream);
  else
    launch(images, labels, indices, count, epoch, p, static_cast<__nv_bfloat16*>(out_images), out_labels, stream);
}

}  // namespace cutrain
