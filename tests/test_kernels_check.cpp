// The error-check macros and the device probe.
#include <catch2/catch.hpp>
#include <dlfcn.h>

#include "kernels/base/check.h"
#include "kernels/base/device.h"
#include "tests/gpu.h"

TEST_CASE("CUDA_CHECK names the call, the file and the library's error", "[kernels]") {
  try {
    CUDA_CHECK(cudaErrorInvalidValue);
    FAIL("CUDA_CHECK did not throw");
  } catch (const cutrain::CheckError& e) {
    std::string what = e.what();
    CHECK(what.find("cudaErrorInvalidValue failed at") != std::string::npos);
    CHECK(what.find("test_kernels_check.cpp:") != std::string::npos);
    CHECK(what.find("invalid argument") != std::string::npos);
  }
}

TEST_CASE("CUDNN_CHECK and CUBLAS_CHECK carry their library's error string", "[kernels]") {
  // The macros are statements; the lambdas make them expressions for Catch.
  CHECK_THROWS_WITH([] { CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); }(), Catch::Contains("CUDNN_STATUS_BAD_PARAM"));
  CHECK_THROWS_WITH([] { CUBLAS_CHECK(CUBLAS_STATUS_NOT_INITIALIZED); }(),
                    Catch::Contains("CUBLAS_STATUS_NOT_INITIALIZED"));
  CHECK_NOTHROW([] { CUDA_CHECK(cudaSuccess); }());
}

TEST_CASE("the device probe answers in one line either way", "[kernels]") {
  const std::string& why = cutrain::cuda_unavailable_reason();
  if (!why.empty()) {
    CHECK(why.rfind("no CUDA device: ", 0) == 0);
    CHECK(why.find('\n') == std::string::npos);
    // Without a driver the runtime's own string would say that the driver is too old; the probe
    // says that there is none.
    if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL))
      dlclose(driver);
    else
      CHECK(why == "no CUDA device: no NVIDIA driver was found on this machine");
  }
  CHECK(&why == &cutrain::cuda_unavailable_reason());  // asked once, cached
}

TEST_CASE("a GPU's peak is known by its name, with the PCIe and NVL forms of an H100 told apart", "[kernels]") {
  CHECK(cutrain::peak_tflops_of("NVIDIA H200", true) == 989.0);
  CHECK(cutrain::peak_tflops_of("NVIDIA H100 80GB HBM3", true) == 989.0);
  CHECK(cutrain::peak_tflops_of("NVIDIA H100 80GB HBM3", false) == 67.0);
  CHECK(cutrain::peak_tflops_of("NVIDIA H100 PCIe", true) == 756.0);
  CHECK(cutrain::peak_tflops_of("NVIDIA H100 NVL", true) == 835.0);
  CHECK(cutrain::peak_tflops_of("NVIDIA A100-SXM4-80GB", true) == 312.0);
  CHECK(cutrain::peak_tflops_of("NVIDIA GeForce RTX 4090", true) == 0.0);  // not known: no MFU
}

TEST_CASE("a CUDA device is visible", CUTRAIN_GPU_TAG) {
  CUTRAIN_REQUIRE_GPU();
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  CHECK(count > 0);
}
