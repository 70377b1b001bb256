// [gpu] ResNet-18 on cuDNN, cuBLAS and our kernels against the CPU reference: one full training
// step (forward, backward, SGD) from the same weights and batch, compared tensor by tensor with
// the relative error ||gpu - cpu|| / ||cpu||: <= 1e-4 in fp32 (deterministic algorithms, TF32
// off), <= 2e-2 in bf16 (bf16 activations and weights: 8 bits of mantissa). The GPU's outputs
// are poisoned first (0xFF bytes: NaN), so an element nobody wrote fails the comparison.
// Then: a step captured as a CUDA graph replays to the eager step's result, bit for bit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <random>
#include <utility>

#include <cuda_bf16.h>

#include "kernels/check.h"
#include "nn/resnet.h"
#include "nn/sgd.h"
#include "tests/gpu.h"

using namespace cutrain;

namespace {

double relative_error(const float* a, const float* b, int64_t n) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < n; ++i) {
    diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    norm += double(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
}

void poison(const Tensor& t) {
  CUDA_CHECK(cudaMemset(t.data, 0xFF, t.bytes()));
  CUDA_CHECK(cudaDeviceSynchronize());
}

ResNetConfig parity_config(Stem stem) {
  ResNetConfig c;
  c.stem = stem;
  c.width = 64;
  c.batch_size = 8;
  c.image_size = stem == Stem::cifar ? 32 : 64;
  c.num_classes = 10;
  c.seed = 5;
  return c;
}

// The same batch for every model: 3 image channels (bf16-rounded when the GPU computes in
// bf16, so all see the same numbers), then zeros in the GPU's padding channels.
void fill_batch(std::initializer_list<ResNet18*> models, DType dtype) {
  const ResNetConfig& c = (*models.begin())->config();
  std::mt19937 rng(17);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  const int64_t pixels = int64_t(c.batch_size) * c.image_size * c.image_size;
  std::vector<float> image(size_t(pixels * 3));
  for (float& v : image) v = dtype == DType::bf16 ? __bfloat162float(__float2bfloat16(pixel(rng))) : pixel(rng);
  std::vector<int32_t> labels(size_t(c.batch_size));
  for (int32_t& l : labels) l = int32_t(rng() % c.num_classes);
  for (ResNet18* model : models) {
    const int channels = model->input_channels();
    std::vector<float> x(size_t(pixels * channels), 0.0f);
    for (int64_t p = 0; p < pixels; ++p) std::copy_n(&image[p * 3], 3, &x[p * channels]);
    write_floats(x, model->input());
    copy_from_host(labels.data(), model->labels());
  }
}

struct StepResult {
  std::vector<float> logits, loss, grads, update, buffers;
};

StepResult train_step(ResNet18& model, SGD& sgd) {
  StepResult r;
  std::vector<float> before = read_floats(model.params().values());
  if (model.context().on_gpu()) {
    poison(model.logits());
    poison(model.params().grads());
  }
  model.forward(true);
  model.backward();
  sgd.step();
  model.context().synchronize();
  r.logits = read_floats(model.logits());
  r.loss = read_floats(Tensor(const_cast<float*>(model.loss()), DType::f32, model.context().device(), {1}));
  r.grads = read_floats(model.params().grads());
  r.update = read_floats(model.params().values());
  for (size_t i = 0; i < before.size(); ++i) r.update[i] -= before[i];
  r.buffers = read_floats(model.params().buffer_values());
  return r;
}

}  // namespace

TEST_CASE("A ResNet-18 training step on the GPU matches the CPU reference", "[gpu]") {
  CUTRAIN_REQUIRE_GPU();
  const Stem stem = GENERATE(Stem::cifar, Stem::imagenet);
  const DType dtype = GENERATE(DType::f32, DType::bf16);
  const double tolerance = dtype == DType::f32 ? 1e-4 : 2e-2;
  INFO(stem_name(stem) << " stem, " << dtype_name(dtype));

  Context cpu_ctx({});
  ContextOptions gpu_options;
  gpu_options.device = Device::cuda;
  gpu_options.dtype = dtype;
  gpu_options.deterministic = true;
  Context gpu_ctx(gpu_options);
  ResNet18 cpu(cpu_ctx, parity_config(stem)), gpu(gpu_ctx, parity_config(stem));
  REQUIRE(read_floats(cpu.params().values()) == read_floats(gpu.params().values()));
  const SgdConfig sgd_config{0.9f, 5e-4f, true};
  SGD cpu_sgd(cpu_ctx, cpu.params(), sgd_config), gpu_sgd(gpu_ctx, gpu.params(), sgd_config);
  cpu_sgd.set_lr(0.1f);
  gpu_sgd.set_lr(0.1f);
  fill_batch({&cpu, &gpu}, dtype);

  StepResult want = train_step(cpu, cpu_sgd), got = train_step(gpu, gpu_sgd);
  CHECK(relative_error(got.logits.data(), want.logits.data(), int64_t(want.logits.size())) <= tolerance);
  CHECK(std::abs(got.loss[0] - want.loss[0]) <= tolerance * std::abs(want.loss[0]));
  for (const Parameter* p : cpu.params().in_layout_order()) {
    INFO(p->name);
    CHECK(relative_error(got.grads.data() + p->offset, want.grads.data() + p->offset, p->numel) <= tolerance);
    CHECK(relative_error(got.update.data() + p->offset, want.update.data() + p->offset, p->numel) <= tolerance);
  }
  for (const BufferEntry& b : cpu.buffers()) {
    INFO(b.name);
    CHECK(relative_error(got.buffers.data() + b.offset, want.buffers.data() + b.offset, b.numel) <= tolerance);
  }
}

TEST_CASE("A training step captured as a CUDA graph replays like the eager step", "[gpu]") {
  // Three steps with three learning rates, eager on one model and replayed on another, from the
  // same weights and batch. Every reduction of the step has a fixed order (batch norm's merges,
  // the loss; cuDNN in its deterministic algorithms, the same ones for both models; cuBLAS), so
  // the two must agree bit for bit: weights and running statistics after each of the steps.
  CUTRAIN_REQUIRE_GPU();
  const DType dtype = GENERATE(DType::f32, DType::bf16);
  ContextOptions options;
  options.device = Device::cuda;
  options.dtype = dtype;
  options.deterministic = true;
  Context eager_ctx(options), graph_ctx(options);
  ResNetConfig c = parity_config(Stem::cifar);
  c.width = 16;
  ResNet18 eager(eager_ctx, c), graphed(graph_ctx, c);
  SGD eager_sgd(eager_ctx, eager.params(), SgdConfig{}), graph_sgd(graph_ctx, graphed.params(), SgdConfig{});
  fill_batch({&eager, &graphed}, dtype);
  // One eager step on each first: cuDNN and cuBLAS do their first-use work outside the capture.
  for (auto [model, sgd] : {std::pair{&eager, &eager_sgd}, std::pair{&graphed, &graph_sgd}}) {
    sgd->set_lr(0.1f);
    model->forward(true);
    model->backward();
    sgd->step();
  }
  REQUIRE(read_floats(graphed.params().values()) == read_floats(eager.params().values()));
  const float lrs[3] = {0.1f, 0.05f, 0.02f};

  std::vector<std::vector<float>> eager_weights, eager_stats;
  for (float lr : lrs) {
    eager_sgd.set_lr(lr);
    eager.forward(true);
    eager.backward();
    eager_sgd.step();
    eager_ctx.synchronize();  // the pinned learning rate is read when the stream reaches the step
    eager_weights.push_back(read_floats(eager.params().values()));
    eager_stats.push_back(read_floats(eager.params().buffer_values()));
  }
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(graph_ctx.stream, cudaStreamCaptureModeThreadLocal));
  graphed.forward(true);
  graphed.backward();
  graph_sgd.step();
  CUDA_CHECK(cudaStreamEndCapture(graph_ctx.stream, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (size_t step = 0; step < 3; ++step) {
    INFO(dtype_name(dtype) << ", step " << step);
    graph_sgd.set_lr(lrs[step]);
    CUDA_CHECK(cudaGraphLaunch(exec, graph_ctx.stream));
    graph_ctx.synchronize();
    // == on the floats: every value the same, and a NaN never equal (no bits are compared that
    // a replay could leave unwritten).
    CHECK(read_floats(graphed.params().values()) == eager_weights[step]);
    CHECK(read_floats(graphed.params().buffer_values()) == eager_stats[step]);
  }
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
}
