// [gpu] The fused unit bn-relu-conv (Note [The fused unit bn-relu-conv] in nn/bn_relu_conv.h) on
// data of mean 1000 and std 1, the large-mean test of batch norm (tests/test_kernels_gpu_batchnorm.cpp)
// run through the unit's fused forward: bn1's statistics, then conv2's cuDNN graph with its
// scale, shift and ReLU prologue, against the CPU's convolution of the unfused batch norm computed
// in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "kernels/conv2d_cpu.h"
#include "nn/bn_relu_conv.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"

using namespace cutrain;

TEMPLATE_TEST_CASE("The fused unit bn-relu-conv holds for data of mean 1000 and std 1", CUTRAIN_GPU_TAG, float,
                   __nv_bfloat16) {
  // The prologue computes z = y1*scale + shift, where y1*scale and shift are near 1000*invstd and
  // cancel to z of typical size 1, so each must be kept in fp32 (the graph's FLOAT intermediates):
  // rounded to bf16 on the way, z would be off by several units. In fp32 each rounding is about
  // 3e-5, so conv2's output is the oracle's to about 1e-4 of its size; in bf16 the activation and
  // the output are each rounded to 8 bits (test::parity_tolerance).
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const DType dtype = std::is_same_v<T, float> ? DType::f32 : DType::bf16;
  ContextOptions options;
  options.device = Device::cuda;
  options.dtype = dtype;
  options.deterministic = true;
  options.fusion = true;
  Context ctx(options);
  const ConvShape s{16, 8, 8, 16, 16, 3, 3, 1, 1};
  ModelResources resources(ctx);
  Activation& y1 = resources.plan.activation(dtype, {s.N, s.H, s.W, s.C});
  BnReluConv unit(resources, "layer1.0.bn1", "layer1.0.conv2", y1, s.K, s.R, s.stride, s.pad);
  resources.allocate(7);
  unit.bind();
  REQUIRE(unit.fused());

  std::mt19937 rng(29);
  std::normal_distribution<float> normal;
  std::vector<float> x(size_t(s.N) * s.H * s.W * s.C), w(size_t(s.K) * s.R * s.S * s.C);
  for (float& e : x) e = 1000.0f + normal(rng);
  for (float& e : w) e = 0.1f * normal(rng);
  write_floats(x, y1.value);
  write_floats(w, unit.conv->weight.value);
  if (dtype == DType::bf16) write_floats(w, unit.conv->weight.value_bf16);
  x = read_floats(y1.value);  // as T holds them
  w = test::rounded_to<T>(w);

  unit.forward(/*train=*/true, ctx.main_stream());
  ctx.synchronize();
  const std::vector<float> got = read_floats(unit.conv->y.value);

  // The oracle: batch norm's training forward in double (gamma 1, beta 0 as initialised), its
  // ReLU, the activation rounded to T as conv2 takes it, and the CPU's convolution.
  const int64_t rows = int64_t(s.N) * s.H * s.W;
  std::vector<double> mean(size_t(s.C), 0.0), var(size_t(s.C), 0.0);
  for (int64_t m = 0; m < rows; ++m)
    for (int c = 0; c < s.C; ++c) mean[size_t(c)] += x[size_t(m * s.C + c)] / double(rows);
  for (int64_t m = 0; m < rows; ++m)
    for (int c = 0; c < s.C; ++c) var[size_t(c)] += std::pow(x[size_t(m * s.C + c)] - mean[size_t(c)], 2) / double(rows);
  std::vector<float> activation(x.size());
  int cut = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = i % size_t(s.C);
    const double z = (x[i] - mean[c]) / std::sqrt(var[c] + double(BatchNorm2d::kEps));
    activation[i] = float(z > 0 ? z : 0);
    cut += z <= 0;
  }
  REQUIRE(cut > int(x.size()) / 5);  // the ReLU is at work
  activation = test::rounded_to<T>(activation);
  std::vector<float> want(got.size());
  conv2d_forward_cpu(activation.data(), w.data(), s, want.data());
  const double error = test::relative_error(got, want);
  INFO("relative error of conv2's output: " << error);
  CHECK(error <= test::parity_tolerance<T>());
}
