// [gpu] The moving average of the weights (nn/model_ema.h) on the GPU: kernels/ema.cu's update equals its CPU
// twin's bit for bit (ema.cuh rounds each product and the sum on its own, so nvcc fuses none of them), and the
// exchange with the model for evaluation puts everything back, the weights' bf16 copies included.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "nn/model_ema.h"
#include "tests/gpu.h"
#include "tests/nn_fixtures.h"

using namespace cutrain;

namespace {

// The bf16 copies of the weights that forward reads, parameter after parameter.
std::vector<float> bf16_copies(const ParameterSet& params) {
  std::vector<float> copies;
  for (const Parameter* p : params.in_layout_order()) {
    const std::vector<float> one = read_floats(p->value_bf16);
    copies.insert(copies.end(), one.begin(), one.end());
  }
  return copies;
}

// The same random values in a model on either device: weights N(0, 1), running statistics positive.
void fill(ResNet18& model, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> values(size_t(model.params().values().numel()));
  for (float& v : values) v = normal(rng);
  std::vector<float> buffers(size_t(model.params().buffer_values().numel()));
  for (float& b : buffers) b = 0.5f + std::abs(normal(rng));
  model.context().synchronize();
  write_floats(values, model.params().values());
  write_floats(buffers, model.params().buffer_values());
  model.sync_weight_copies();
  model.num_batches_tracked += 1000;
  model.context().synchronize();
}

}  // namespace

TEST_CASE("The GPU's EMA update is the CPU twin's, bit for bit, and evaluation's exchange puts the model back",
          CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  ContextOptions gpu_options;
  gpu_options.device = Device::cuda;
  gpu_options.dtype = DType::bf16;
  Context cpu({}), gpu(gpu_options);
  ResNet18 on_cpu(cpu, test::tiny_resnet()), on_gpu(gpu, test::tiny_resnet());
  const double decay = model_ema_decay(1, 256, 32, 20, 0.99998);
  ModelEma cpu_ema(on_cpu, decay), gpu_ema(on_gpu, decay);
  for (uint32_t k = 0; k < 4; ++k) {
    fill(on_cpu, k);
    fill(on_gpu, k);
    cpu_ema.update();
    gpu_ema.update();
    if (k == 0) {  // a warm-up update: the next copies again
      cpu_ema.restart();
      gpu_ema.restart();
    }
  }
  gpu.synchronize();
  CHECK(read_floats(gpu_ema.values()) == read_floats(cpu_ema.values()));
  CHECK(read_floats(gpu_ema.buffer_values()) == read_floats(cpu_ema.buffer_values()));
  CHECK(gpu_ema.num_batches_tracked() == cpu_ema.num_batches_tracked());

  const std::vector<float> weights = read_floats(on_gpu.params().values());
  const std::vector<float> copies = bf16_copies(on_gpu.params());
  gpu_ema.swap_with_model();
  gpu.synchronize();
  CHECK(read_floats(on_gpu.params().values()) == read_floats(cpu_ema.values()));
  CHECK(bf16_copies(on_gpu.params()) != copies);  // forward reads the average
  gpu_ema.swap_with_model();
  gpu.synchronize();
  CHECK(read_floats(on_gpu.params().values()) == weights);
  CHECK(bf16_copies(on_gpu.params()) == copies);
}
