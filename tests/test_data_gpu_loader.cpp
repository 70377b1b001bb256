// The GPU gather + augment kernel against the CPU loader, bit for bit.
#include <catch2/catch.hpp>

#include <cstring>

#include "data/gpu_loader.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "kernels/base/check.h"
#include "tests/gpu.h"
#include "tests/test_data_util.h"

using namespace cutrain;

TEST_CASE("gpu loader: gather + augment on the GPU equals the CPU loader bit for bit", "[data]" CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  Dataset d = test::patterned_dataset(500);
  DistributedSampler sampler(d.size(), 3, 2, true, 11);
  sampler.set_epoch(6);
  const std::vector<int64_t> indices = sampler.indices();  // 167 samples
  for (PixelType type : {PixelType::f32, PixelType::bf16})
    for (auto [train, mirror] : {std::pair{true, false}, {false, false}, {false, true}}) {
      LoaderConfig config;
      config.batch_size = 32;
      config.pixel_type = type;
      config.out_channels = train ? 8 : 3;
      config.drop_last = !train;  // exercise the partial last batch too
      config.augment.train = train;
      config.augment.seed = 11;
      config.augment.mirror = mirror;  // evaluation's second view under --tta flip
      const size_t batch_bytes = size_t(config.batch_size) * 32 * 32 * config.out_channels * pixel_type_size(type);
      INFO("pixel type " << int(type) << " train " << train << " mirror " << mirror);

      Loader cpu(d, config);
      GpuLoader gpu(d, config);
      cudaStream_t stream;
      CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
      void* out_images = nullptr;
      int32_t* out_labels = nullptr;
      CUDA_CHECK(cudaMalloc(&out_images, batch_bytes));
      CUDA_CHECK(cudaMalloc(&out_labels, config.batch_size * sizeof(int32_t)));
      std::vector<uint8_t> images(batch_bytes);
      std::vector<int32_t> labels(config.batch_size);

      cpu.start_epoch(indices, 6);
      gpu.start_epoch(indices, 6, stream);
      REQUIRE(gpu.num_batches() == cpu.num_batches());
      Batch batch;
      for (size_t b = 0; cpu.next(batch); ++b) {
        REQUIRE(gpu.batch_size(b) == batch.size);
        CUDA_CHECK(cudaMemsetAsync(out_images, 0xff, batch_bytes, stream));  // no stale bytes pass
        gpu.load_batch(b, out_images, out_labels, stream);
        const size_t bytes = batch_bytes / config.batch_size * batch.size;
        CUDA_CHECK(cudaMemcpyAsync(images.data(), out_images, bytes, cudaMemcpyDeviceToHost, stream));
        CUDA_CHECK(cudaMemcpyAsync(labels.data(), out_labels, batch.size * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                   stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        REQUIRE(std::memcmp(images.data(), batch.images, bytes) == 0);
        REQUIRE(std::memcmp(labels.data(), batch.labels, batch.size * sizeof(int32_t)) == 0);
      }
      CUDA_CHECK(cudaFree(out_images));
      CUDA_CHECK(cudaFree(out_labels));
      CUDA_CHECK(cudaStreamDestroy(stream));
    }
}

TEST_CASE("gpu loader: bad epoch indices are rejected before any kernel runs", "[data]" CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  Dataset d = test::patterned_dataset(10);
  GpuLoader gpu(d, LoaderConfig{});
  CHECK_THROWS_WITH(gpu.start_epoch({1, 10}, 0, nullptr), Catch::Contains("index 10 at position 1"));
  CHECK_THROWS_WITH(gpu.start_epoch(std::vector<int64_t>(11, 0), 0, nullptr), Catch::Contains("at most 10"));
}
