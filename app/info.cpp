// `cutrain info`: cutrain's version and commit, the versions of the libraries this process loaded
// (the CUDA toolkit's or Python's nvidia-* wheels, whichever the library path found first), and
// the CUDA devices of this machine.
#include <cstdio>

#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

#include "app/commands.h"
#include "app/version.h"
#include "kernels/base/check.h"
#include "kernels/base/device.h"

namespace cutrain {
namespace {

// 13000 -> "13.0" (cudaRuntimeGetVersion and cudaDriverGetVersion encode 1000 * major + 10 * minor).
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

std::string cublas_version() {
  int major = 0, minor = 0, patch = 0;
  cublasGetProperty(MAJOR_VERSION, &major);
  cublasGetProperty(MINOR_VERSION, &minor);
  cublasGetProperty(PATCH_LEVEL, &patch);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::string nccl_version() {
  int v = 0;  // 22803 for 2.28.3 (NCCL_VERSION_CODE's encoding since 2.9)
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

}  // namespace

void add_info_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "info", "Print cutrain's version and commit, the loaded library versions and the CUDA devices");
  cmd->callback([&exit_code] {
    std::printf("%s\n", version_line().c_str());
    const size_t cudnn = cudnnGetVersion();
    int runtime = 0, driver = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);  // 0 without a driver
    std::printf("cuDNN %zu.%zu.%zu, cuBLAS %s, NCCL %s, CUDA runtime %s, driver %s (as loaded)\n", cudnn / 10000,
                cudnn / 100 % 100, cudnn % 100, cublas_version().c_str(), nccl_version().c_str(),
                cuda_version(runtime).c_str(), driver ? ("CUDA " + cuda_version(driver)).c_str() : "none");
    if (!cuda_available()) {
      std::printf("%s\n", cuda_unavailable_reason().c_str());
      exit_code = 0;
      return;
    }
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    for (int d = 0; d < count; ++d) std::printf("cuda:%d %s\n", d, cuda_device_description(d).c_str());
    exit_code = 0;
  });
}

}  // namespace cutrain
