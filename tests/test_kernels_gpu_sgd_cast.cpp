// SGD and the fp32 <-> bf16 casts on the GPU against the CPU reference and the host conversions.
#include <catch2/catch.hpp>

#include <cuda_bf16.h>

#include <random>
#include <vector>

#include "kernels/cast.h"
#include "kernels/sgd.h"
#include "tests/device_buffer.h"
#include "tests/gpu.h"
#include "tests/gradcheck.h"

using namespace cutrain;
using test::DeviceBuffer;

TEST_CASE("SGD CUDA matches the CPU reference over three steps and writes the bf16 copy", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const bool nesterov = GENERATE(false, true);
  const SgdConfig cfg{0.9f, 5e-4f, nesterov};
  const int64_t n = 100003;  // not a multiple of any block size
  std::mt19937 rng(51);
  std::vector<float> param = test::random_vector(n, rng), buf = test::random_vector(n, rng);
  DeviceBuffer<float> gparam(param), gbuf(buf), ggrad(n), glr(1);
  DeviceBuffer<__nv_bfloat16> gparam_bf16(n);
  for (float lr : {0.1f, 0.05f, 0.2f}) {
    const std::vector<float> grad = test::random_vector(n, rng);
    sgd_step_cpu(param.data(), grad.data(), buf.data(), n, &lr, cfg);
    ggrad.copy_from(grad);
    glr.copy_from({lr});
    sgd_step_cuda(gparam.get(), ggrad.get(), gbuf.get(), gparam_bf16.get(), n, glr.get(), cfg, nullptr);
  }
  const std::vector<float> result = gparam.copy_to_host();
  CHECK(test::relative_error(result, param) <= 1e-6);  // the same formula; only FMA contraction differs
  CHECK(test::relative_error(gbuf.copy_to_host(), buf) <= 1e-6);
  CHECK(test::relative_error(test::download(gparam_bf16), test::rounded_to<__nv_bfloat16>(result)) == 0.0);
}

TEST_CASE("casts between fp32 and bf16 on the GPU round to nearest even like the host", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  const int64_t n = 4099;
  std::mt19937 rng(52);
  const std::vector<float> values = test::random_vector(n, rng, -100.0f, 100.0f);
  DeviceBuffer<float> gvalues(values), gback(n);
  DeviceBuffer<__nv_bfloat16> gbf16(n);
  cast_f32_to_bf16_cuda(gvalues.get(), gbf16.get(), n, nullptr);
  cast_bf16_to_f32_cuda(gbf16.get(), gback.get(), n, nullptr);
  const std::vector<float> expected = test::rounded_to<__nv_bfloat16>(values);
  CHECK(test::relative_error(test::download(gbf16), expected) == 0.0);
  CHECK(test::relative_error(gback.copy_to_host(), expected) == 0.0);
}
