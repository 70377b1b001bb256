// The poolings' CUDA kernels against the CPU reference, fp32 and bf16 (where ties are common,
// and the shared first-maximum rule must route them identically).
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <random>
#include <vector>

#include "kernels/pooling.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::PoisonedBuffer;

TEMPLATE_TEST_CASE("max pool 3x3/2 CUDA matches the CPU reference", CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const auto [N, H, W, C] = GENERATE(table<int, int, int, int>({{4, 16, 16, 64}, {3, 17, 15, 3}}));
  INFO("N " << N << ", H " << H << ", W " << W << ", C " << C);
  const int Ho = maxpool_out_size(H), Wo = maxpool_out_size(W);
  std::mt19937 rng(31);
  const std::vector<float> x = test::rounded_to<T>(test::random_vector(size_t(N) * H * W * C, rng));
  const std::vector<float> dy = test::rounded_to<T>(test::random_vector(size_t(N) * Ho * Wo * C, rng));
  std::vector<float> y(dy.size()), dx(x.size());
  maxpool3x3s2_forward_cpu(x.data(), N, H, W, C, y.data());
  maxpool3x3s2_backward_cpu(x.data(), dy.data(), N, H, W, C, dx.data());

  PoisonedBuffer<T> gx(test::convert_to<T>(x)), gdy(test::convert_to<T>(dy)), gy(y.size()), gdx(dx.size());
  maxpool3x3s2_forward_cuda<T>(gx.get(), N, H, W, C, gy.get(), nullptr);
  maxpool3x3s2_backward_cuda<T>(gx.get(), gdy.get(), N, H, W, C, gdx.get(), nullptr);
  CHECK(test::relative_error(test::download(gy), y) == 0.0);  // a copy of an input element
  CHECK(test::relative_error(test::download(gdx), dx) <= test::parity_tolerance<T>());
}

TEMPLATE_TEST_CASE("global average pool CUDA matches the CPU reference", CUTRAIN_GPU_TAG, float, __nv_bfloat16) {
  CUTRAIN_REQUIRE_GPU();
  using T = TestType;
  const auto [N, H, W, C] = GENERATE(table<int, int, int, int>({{8, 4, 4, 512}, {5, 7, 7, 10}}));
  INFO("N " << N << ", H " << H << ", W " << W << ", C " << C);
  std::mt19937 rng(32);
  const std::vector<float> x = test::rounded_to<T>(test::random_vector(size_t(N) * H * W * C, rng));
  const std::vector<float> dy = test::rounded_to<T>(test::random_vector(size_t(N) * C, rng));
  std::vector<float> y(dy.size()), dx(x.size());
  global_avgpool_forward_cpu(x.data(), N, H, W, C, y.data());
  global_avgpool_backward_cpu(dy.data(), N, H, W, C, dx.data());

  PoisonedBuffer<T> gx(test::convert_to<T>(x)), gdy(test::convert_to<T>(dy)), gy(y.size()), gdx(dx.size());
  global_avgpool_forward_cuda<T>(gx.get(), N, H, W, C, gy.get(), nullptr);
  global_avgpool_backward_cuda<T>(gdy.get(), N, H, W, C, gdx.get(), nullptr);
  CHECK(test::relative_error(test::download(gy), y) <= test::parity_tolerance<T>());
  CHECK(test::relative_error(test::download(gdx), dx) <= test::parity_tolerance<T>());
}
